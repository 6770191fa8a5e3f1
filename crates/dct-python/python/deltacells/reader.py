"""Tiles and batches: parse a tile, decode it (into fresh arrays or the caller's buffers), gather rows; and
``DeltaCellsDataset``, where the original package had it.

Decoding and gathering run in the Rust core with the GIL released; the arrays they return are numpy arrays that
own the Rust buffers, or views of the caller's ``out_*`` buffers.
"""

from __future__ import annotations

from deltacells._tiles import DecodedTile, SparseBatch, Tile, read_tile, row_offsets
from deltacells.dataset import DeltaCellsDataset

__all__ = ["DecodedTile", "DeltaCellsDataset", "SparseBatch", "Tile", "read_tile", "row_offsets"]
