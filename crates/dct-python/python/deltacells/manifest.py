"""``manifest.json``: the dataset's shape, tiles, encoder settings and side files.

Parsed and validated by the Rust reader's rules (every key and its type, the tile lists, the obs fields); an
invalid manifest raises :class:`~deltacells.format.FormatError` (a ``ValueError``) naming the key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from deltacells import _core

__all__ = [
    "DEFAULT_OBS_TILES_PER_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GENE_ORDER_NAME",
    "MANIFEST_NAME",
    "OBS_SCHEMA_NAME",
    "OBS_SHARD_PATTERN",
    "TILE_PATTERN",
    "VAR_NAMES_NAME",
    "VAR_TABLE_NAME",
    "Manifest",
]

# The dataset's object names and layout are defined once, in Rust (dct_format::objects); these are its values.
FORMAT_NAME: str = _core.DATASET_FORMAT_NAME
#: The manifest version this package writes (it reads versions 1 and 2).
FORMAT_VERSION: int = _core.MANIFEST_WRITE_VERSION
MANIFEST_NAME: str = _core.MANIFEST_NAME
GENE_ORDER_NAME: str = _core.GENE_ORDER_NAME
VAR_NAMES_NAME: str = _core.VAR_NAMES_NAME
VAR_TABLE_NAME: str = _core.VAR_TABLE_NAME
OBS_SCHEMA_NAME: str = _core.OBS_SCHEMA_NAME
#: ``str.format`` patterns of the names that ``Manifest.tile_name`` and ``Manifest.obs_shard_name`` give.
TILE_PATTERN: str = "{}{{:0{}d}}{}".format(*_core.TILE_NAME_PARTS)
OBS_SHARD_PATTERN: str = "{}{{:0{}d}}{}".format(*_core.OBS_SHARD_NAME_PARTS)
DEFAULT_OBS_TILES_PER_FILE: int = _core.DEFAULT_OBS_TILES_PER_FILE


@dataclass
class Manifest:
    """The contents of ``manifest.json`` (see the format specification)."""

    n_cells: int
    n_genes: int
    tile_size: int
    tile_cells: list[int]
    tile_nnz: list[int]
    tile_bytes: list[int]
    n_chunks: int | None = None
    zstd_level: int | None = None
    has_gene_order: bool = False
    has_var_names: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    has_obs: bool = False
    obs_tiles_per_file: int = 0
    obs_fingerprint: str = ""
    obs_shard_bytes: list[int] = field(default_factory=list)
    obs_shard_sha256: list[str] = field(default_factory=list)
    has_var_table: bool = False
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    obs_shard_footer_crc32: list[int] | None = None
    #: SHA-256 (hex) of each side file as written (``gene_order.npy``, ``var_names.txt``, ``var.parquet``;
    #: version 2), checked when they are read.
    side_file_sha256: dict[str, str] = field(default_factory=dict)
    #: Keys this reader does not know, kept as they were (a newer writer's additions).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tiles(self) -> int:
        """Tiles."""
        return len(self.tile_cells)

    @property
    def limits(self) -> np.ndarray:
        """Cumulative cells per tile (int64, a new array each time)."""
        return np.cumsum(np.asarray(self.tile_cells, dtype=np.int64), dtype=np.int64)

    @property
    def nnz(self) -> int:
        """Stored nonzeros of all tiles."""
        return int(sum(self.tile_nnz))

    @property
    def n_obs_shards(self) -> int:
        """Obs shards (0 without obs)."""
        if not self.has_obs or self.obs_tiles_per_file < 1:
            return 0
        return _core.n_obs_shards(self.n_tiles, self.obs_tiles_per_file)

    @staticmethod
    def tile_name(i: int) -> str:
        """The object name of tile ``i`` (``tiles/tile_000003.dct``)."""
        return _core.tile_name(int(i))

    @staticmethod
    def obs_shard_name(shard: int) -> str:
        """The object name of obs shard ``shard`` (``obs/obs_0001.parquet``)."""
        return _core.obs_shard_name(int(shard))

    def obs_shard_tiles(self, shard: int) -> range:
        """The tiles whose obs shard ``shard`` holds."""
        return range(*_core.obs_shard_tiles(self.n_tiles, self.obs_tiles_per_file, int(shard)))

    def to_json(self) -> str:
        """The manifest as JSON text (as the Rust writer writes it: pretty-printed, keys in the specification's
        order). Raises :class:`~deltacells.format.FormatError` if the manifest is not valid."""
        d = asdict(self)
        extra = d.pop("extra")
        if d["obs_shard_footer_crc32"] is None:
            del d["obs_shard_footer_crc32"]
        if not d["side_file_sha256"]:
            del d["side_file_sha256"]
        for k in ("n_chunks", "zstd_level"):
            if d[k] is None:
                del d[k]
        d.update(extra)
        return _core.normalize_manifest(json.dumps(d).encode())

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parses and validates ``manifest.json`` text. Raises :class:`~deltacells.format.FormatError` naming the
        key for an invalid manifest."""
        raw = text.encode() if isinstance(text, str) else bytes(text)
        d = json.loads(_core.normalize_manifest(raw))
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: d.pop(k) for k in list(d) if k not in known}
        return cls(**d, extra=extra)
