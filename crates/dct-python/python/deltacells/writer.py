"""Writing tiles and datasets from in-memory matrices.

Matrices may be scipy CSR, CSC or COO, or dense arrays, of integer or float dtype holding integer counts
(unsorted indices and repeats are fine: repeats are summed, explicit zeros dropped). They are validated and encoded
by the Rust encoder; the caller's matrix is never modified.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells import _core
from deltacells._args import int_argument
from deltacells._files import write_atomic
from deltacells.manifest import Manifest

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import scipy.sparse

    from deltacells._obs_schema import ObsSchema

__all__ = ["DEFAULT_CHUNKS", "DEFAULT_LEVEL", "DatasetWriter", "encode_tile", "permute_columns", "write_tile"]

DEFAULT_LEVEL = 19
DEFAULT_CHUNKS = 8


def _csr_arrays(matrix: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """``(indptr, indices, data, n_rows, n_cols)`` of a matrix, as CSR arrays the Rust core takes (no copy for
    a CSR matrix of supported dtypes)."""
    import scipy.sparse as sp

    if sp.issparse(matrix):
        m = matrix.tocsr()
    else:
        arr = np.asarray(matrix)
        if arr.ndim != 2:
            raise ValueError(f"a tile is a 2-D matrix (cells x genes), got an array of shape {arr.shape}")
        m = sp.csr_matrix(arr)
    data = m.data
    if data.dtype == np.bool_:
        data = data.astype(np.uint8)
    elif data.dtype == np.float16:
        data = data.astype(np.float32)
    elif not (np.issubdtype(data.dtype, np.integer) or np.issubdtype(data.dtype, np.floating)):
        raise ValueError(f"unsupported value dtype {data.dtype}: counts must be integers or floats holding integers")
    indptr = np.ascontiguousarray(m.indptr)
    indices = np.ascontiguousarray(m.indices)
    n_rows, n_cols = m.shape
    return indptr, indices, np.ascontiguousarray(data), int(n_rows), int(n_cols)


def encode_tile(
    matrix: Any, *, n_chunks: int = DEFAULT_CHUNKS, level: int = DEFAULT_LEVEL, threads: int | None = None,
    format_version: int = 2,
) -> bytes:
    """Encodes ``matrix`` (cells x genes) as one tile and returns its bytes.

    Chunks are compressed in parallel on ``threads`` threads (default: up to 8); the bytes do not depend on it.
    ``format_version=1`` writes a version-1 tile for readers that know only it (at most 65,536 genes, counts of at
    most 65,535; otherwise ``ValueError`` naming the first cell and gene that need version 2).
    """
    if int(n_chunks) < 1:
        raise ValueError("n_chunks must be at least 1")
    n_chunks, level = int_argument("n_chunks", n_chunks, 1), int_argument("level", level, -(2**31), 2**31 - 1)
    threads = None if threads is None else int_argument("threads", threads, 1)
    indptr, indices, data, n_rows, n_cols = _csr_arrays(matrix)
    return _core.encode_tile(indptr, indices, data, n_rows, n_cols, n_chunks, level, threads, int(format_version))


def write_tile(path: str | os.PathLike[str], matrix: Any, **kwargs: Any) -> int:
    """Encodes ``matrix`` (see :func:`encode_tile`) and writes it at ``path`` atomically; returns its size."""
    blob = encode_tile(matrix, **kwargs)
    write_atomic(os.fspath(path), blob)
    return len(blob)


def permute_columns(matrix: Any, gene_order: Sequence[int] | np.ndarray) -> scipy.sparse.csr_matrix:
    """A new CSR matrix whose column ``j`` is column ``gene_order[j]`` of ``matrix`` (i.e. ``matrix[:,
    gene_order]``, indices sorted); the input is not modified. ``ValueError`` if ``gene_order`` is not a
    permutation of the columns."""
    import scipy.sparse as sp

    m = sp.csr_matrix(matrix)
    order = np.asarray(gene_order, dtype=np.int64).ravel()
    if len(order) != m.shape[1]:
        raise ValueError("gene_order must be a permutation of range(n_genes)")
    _core.check_gene_order(order.tolist())
    out = m[:, order].tocsr(copy=True)
    out.sort_indices()
    return out


class DatasetWriter:
    """Writes a dataset tile by tile: ``add_tile`` for each tile in order (every tile ``tile_size`` cells, the
    last one fewer), then ``close`` (side files, obs shards, and ``manifest.json`` last).

    ``root`` is a local path or any store URL the reader opens. A destination holding any file is refused
    (``FileExistsError``) unless ``overwrite``. With ``overwrite``, the dataset there is replaced: its
    ``manifest.json`` is deleted first (so an interrupted rewrite never looks complete), then its tiles, obs files
    and gene side files; files that are no part of a dataset are left where they are. ``gene_order`` (stored
    column ``j`` is source column ``gene_order[j]``; tiles are given in source column order) may also be assigned
    to ``writer.gene_order`` before the first tile. ``var_names`` and ``var`` are in source gene order. With
    ``obs_schema`` every tile needs its obs (a pandas DataFrame with the schema's columns, or an Arrow table from
    ``obs_schema.encode``). Used as a context manager, the manifest is written only when no exception occurred, so
    an interrupted write leaves no dataset that looks complete. ``format_version=1`` writes a dataset for readers
    that know only version 1.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        n_genes: int,
        tile_size: int,
        gene_order: Sequence[int] | np.ndarray | None = None,
        var_names: Sequence[str] | None = None,
        var: pd.DataFrame | None = None,
        obs_schema: ObsSchema | None = None,
        obs_tiles_per_file: int = 1000,
        obs_compression_level: int = 9,
        n_chunks: int = DEFAULT_CHUNKS,
        level: int = DEFAULT_LEVEL,
        threads: int | None = None,
        metadata: dict[str, Any] | None = None,
        overwrite: bool = False,
        format_version: int = 2,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        if int(tile_size) < 1:
            raise ValueError("tile_size must be positive")
        from deltacells.format import max_genes

        if not 1 <= int(n_genes) <= max_genes(int(format_version)):
            raise ValueError(f"n_genes must be between 1 and {max_genes(int(format_version))}")
        if int(n_chunks) < 1:
            raise ValueError("n_chunks must be at least 1")
        if int(obs_tiles_per_file) < 1:
            raise ValueError("obs_tiles_per_file must be at least 1")
        self.root = os.fspath(root)
        self.n_genes = int(n_genes)
        self.tile_size = int(tile_size)
        self._order_sent = False
        self._gene_order: np.ndarray | None = None
        self.gene_order = gene_order
        if var_names is not None and len(var_names) != self.n_genes:
            raise ValueError("var_names must have n_genes entries")
        self.var_names = None if var_names is None else [str(v) for v in var_names]
        if self.var_names is not None and any("\n" in v or "\r" in v for v in self.var_names):
            raise ValueError("variable names must not contain newlines")
        if var is not None and len(var) != self.n_genes:
            raise ValueError("var must have n_genes rows")
        self.var = var
        self.obs_schema = obs_schema
        self.obs_tiles_per_file = int(obs_tiles_per_file)
        self.n_chunks = int_argument("n_chunks", n_chunks, 1)
        self.level = int_argument("level", level, -(2**31), 2**31 - 1)
        self.threads = None if threads is None else int_argument("threads", threads, 1)
        self.metadata = dict(metadata) if metadata else {}
        self.format_version = int(format_version)
        self._cells: list[int] = []
        self._closed = False
        self._core = _core.DatasetWriter(
            self.root,
            self.n_genes,
            self.tile_size,
            self.n_chunks,
            self.level,
            self.threads,
            json.dumps(self.metadata),
            bool(overwrite),
            self.format_version,
            None if obs_schema is None else obs_schema.to_json(),
            self.obs_tiles_per_file,
            int(obs_compression_level),
            storage_options,
        )

    def _order(self, gene_order: Any) -> np.ndarray:
        order = np.asarray(gene_order, dtype=np.int64).ravel()
        if len(order) != self.n_genes:
            raise ValueError("gene_order must be a permutation of range(n_genes)")
        _core.check_gene_order(order.tolist())
        return order

    @property
    def gene_order(self) -> np.ndarray | None:
        """int64: stored column ``j`` is source column ``gene_order[j]`` (``None``: source order). May be assigned
        until the first tile is added, as in the original package; after it, assigning another order is a
        ``ValueError`` (the tiles written so far are already in the first one)."""
        return self._gene_order

    @gene_order.setter
    def gene_order(self, value: Sequence[int] | np.ndarray | None) -> None:
        order = None if value is None else self._order(value)
        if self._order_sent:
            same = (order is None and self._gene_order is None) or (
                order is not None and self._gene_order is not None and np.array_equal(order, self._gene_order))
            if not same:
                raise ValueError(
                    "gene_order cannot change after the first tile: the tiles already written store their columns "
                    "in the order set then; set writer.gene_order before the first add_tile"
                )
            return
        self._gene_order = order

    def _send_gene_order(self) -> None:
        # Sent with the first tile: the original package lets users assign `writer.gene_order` until then.
        if not self._order_sent:
            if self._gene_order is not None:
                self._core.set_gene_order(self._gene_order.astype(np.int32).tolist())
            self._order_sent = True

    def _obs_frame(self, obs: Any, n: int) -> list[Any] | None:
        if (obs is None) != (self.obs_schema is None):
            raise ValueError(
                "obs must be given for every tile if (and only if) the writer was created with an obs_schema"
            )
        if obs is None:
            return None
        from deltacells._obs_schema import _frame, _table_frame

        schema = self.obs_schema
        assert schema is not None
        rows = obs.num_rows if hasattr(obs, "num_rows") and hasattr(obs, "schema") else len(obs)
        if hasattr(obs, "schema") and hasattr(obs, "column"):
            frame = _table_frame(obs, schema)
        else:
            have, want = set(obs.columns), set(schema.names)
            if have != want:
                missing, extra = sorted(want - have), sorted(have - want)
                raise ValueError(f"obs columns do not match the schema (missing: {missing}, unexpected: {extra})")
            frame = _frame(obs, schema.names, schema)
        if rows != n:
            raise ValueError(f"obs has {rows} rows but the tile has {n} cells")
        return frame

    def add_tile(self, matrix: Any, obs: Any = None) -> int:
        """Adds the next tile (cells x genes in source gene order) and its obs; returns its index. Every check
        comes before anything is written, so a refused tile leaves the writer as it was."""
        if self._closed:
            raise RuntimeError("writer is closed")
        indptr, indices, data, n_rows, n_cols = _csr_arrays(matrix)
        if n_cols != self.n_genes:
            raise ValueError(f"matrix has {n_cols} genes, expected {self.n_genes}")
        if not 1 <= n_rows <= self.tile_size:
            raise ValueError(f"a tile must hold between 1 and tile_size={self.tile_size} cells, got {n_rows}")
        if self._cells and self._cells[-1] < self.tile_size:
            raise ValueError("only the last tile may hold fewer than tile_size cells")
        frame = self._obs_frame(obs, n_rows)
        self._send_gene_order()
        t = int(self._core.add_tile(indptr, indices, data, n_rows, frame))
        self._cells.append(n_rows)
        return t

    def close(self) -> Manifest:
        """Writes the side files, the last obs shard and ``obs/schema.json``, then ``manifest.json``; returns the
        manifest. ``ValueError`` without tiles (the writer stays open); ``RuntimeError`` if already closed."""
        if self._closed:
            raise RuntimeError("writer is already closed")
        if not self._cells:
            raise ValueError("no tiles were written")
        self._send_gene_order()
        order = self.gene_order
        if self.var_names is not None:
            names = self.var_names if order is None else [self.var_names[j] for j in order]
            self._core.set_var_names(names)
        if self.var is not None:
            from deltacells._obs_schema import _var_bytes

            var = self.var if order is None else self.var.iloc[order]
            self._core.put_var_table(_var_bytes(var))
        self._closed = True
        return Manifest.from_json(self._core.close())

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None and not self._closed:
            self.close()
