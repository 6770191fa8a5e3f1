"""The tile format's constants and structure: header and chunk table of a tile, validated without decompressing.

Parsing and validation run in the Rust core (``deltacells._core``); this module gives them the original package's
names. Version 2 is what this package writes; versions 1 and 2 are read.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from deltacells import _core

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("deltacells requires a little-endian host")

__all__ = [
    "CHUNK_ENTRY_SIZE",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_GENES",
    "MAX_VALUE",
    "VERSION",
    "ChunkInfo",
    "FormatError",
    "TileInfo",
    "align8",
    "chunk_entry_size",
    "max_genes",
    "parse_tile_info",
    "payload_crc32",
]

#: The first 8 bytes of every tile.
MAGIC: bytes = bytes(_core.MAGIC)
#: The format version this package writes (it reads versions 1 and 2).
VERSION: int = int(_core.FORMAT_VERSION)
#: Size of the tile header in bytes.
HEADER_SIZE: int = int(_core.HEADER_SIZE)
#: Size of a version-2 chunk entry in bytes (version 1: see :func:`chunk_entry_size`).
CHUNK_ENTRY_SIZE: int = int(_core.CHUNK_ENTRY_SIZE_V2)
#: Most genes a version-2 tile holds (version 1: see :func:`max_genes`).
MAX_GENES: int = int(_core.MAX_GENES_V2)
#: Largest count a tile holds.
MAX_VALUE: int = int(_core.MAX_VALUE)

#: A tile, manifest, shard or cache file breaks the format; a subclass of ``ValueError``.
FormatError = _core.FormatError


def chunk_entry_size(version: int) -> int:
    """Bytes of one chunk-table entry in a tile of format ``version`` (64 for version 1, 96 for version 2)."""
    if version == 1:
        return int(_core.CHUNK_ENTRY_SIZE_V1)
    if version == 2:
        return int(_core.CHUNK_ENTRY_SIZE_V2)
    raise ValueError(f"unknown tile format version {version} (versions 1 and 2 exist)")


def max_genes(version: int) -> int:
    """Most genes a tile of format ``version`` holds (65,536 for version 1, 2^31 for version 2)."""
    if version == 1:
        return int(_core.MAX_GENES_V1)
    if version == 2:
        return int(_core.MAX_GENES_V2)
    raise ValueError(f"unknown tile format version {version} (versions 1 and 2 exist)")


@dataclass(frozen=True)
class ChunkInfo:
    """One chunk-table entry: a run of cells, their nonzeros, and where the chunk's zstd frames are.

    The exception frames (``vexc``, ``gexc``) exist in version 2 only; their lengths are 0 when absent.
    """

    cell_lo: int
    cell_hi: int
    nnz_lo: int
    nnz_hi: int
    gaps_off: int
    gaps_len: int
    vals_off: int
    vals_len: int
    vexc_off: int = 0
    vexc_len: int = 0
    gexc_off: int = 0
    gexc_len: int = 0

    @property
    def nnz(self) -> int:
        """Nonzeros of the chunk."""
        return self.nnz_hi - self.nnz_lo

    @property
    def n_cells(self) -> int:
        """Cells of the chunk."""
        return self.cell_hi - self.cell_lo


@dataclass(frozen=True)
class TileInfo:
    """The header and chunk table of a tile, validated (nothing decompressed)."""

    version: int
    flags: int
    n_cells: int
    nnz: int
    n_genes: int
    indptr_off: int
    total_size: int
    crc32: int
    chunks: tuple[ChunkInfo, ...]

    @property
    def n_chunks(self) -> int:
        """Chunks in the tile."""
        return len(self.chunks)

    @property
    def max_chunk_nnz(self) -> int:
        """Nonzeros of the largest chunk (0 without chunks)."""
        return max((c.nnz for c in self.chunks), default=0)

    @property
    def scratch_nbytes(self) -> int:
        """Scratch bytes one decode thread of the original C decoder needed (4 per nonzero of the largest chunk)."""
        return 4 * self.max_chunk_nnz


def _tile_info(d: dict[str, Any]) -> TileInfo:
    chunks = tuple(ChunkInfo(*c) for c in d["chunks"])
    fields = {k: d[k] for k in ("version", "flags", "n_cells", "nnz", "n_genes", "indptr_off", "total_size", "crc32")}
    return TileInfo(chunks=chunks, **fields)


def parse_tile_info(buf: Any) -> TileInfo:
    """The validated header and chunk table of the tile in ``buf`` (any bytes-like object).

    Raises :class:`FormatError` naming the field, the byte offset and the rule broken.
    """
    return _tile_info(_core.Tile(buf, False).info())


def align8(n: int) -> int:
    """``n`` rounded up to a multiple of 8."""
    return (int(n) + 7) & ~7


def payload_crc32(buf: Any) -> int:
    """CRC-32 of bytes ``64..`` of a tile (what its header's ``crc32`` holds)."""
    return int(_core.payload_crc32(buf))
