"""Tiles and batches: parse a tile, decode it (into fresh arrays or the caller's buffers), gather rows.

Decoding and gathering run in the Rust core with the GIL released; the arrays they return are numpy arrays that
own the Rust buffers, or views of the caller's ``out_*`` buffers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells import _core
from deltacells._indices import cell_indices
from deltacells.format import TileInfo, _tile_info

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse
    import torch

__all__ = ["DecodedTile", "SparseBatch", "Tile", "as_values_dtype", "read_tile", "row_offsets"]

_VALUE_DTYPES = (np.dtype(np.int32), np.dtype(np.float32))


def as_values_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype, if it is one batches and tiles decode to (int32 or float32)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"values dtype must be int32 or float32, got {dtype!r}") from None
    if dt not in _VALUE_DTYPES:
        raise ValueError(f"values dtype must be int32 or float32, got {dt}")
    return dt


def _check_out(arr: Any, name: str, n: int, dtype: Any) -> np.ndarray:
    """Checks a caller's output buffer: a writable, C-contiguous, 1-D numpy array of ``dtype`` with at least
    ``n`` elements."""
    dt = np.dtype(dtype)
    if (
        not isinstance(arr, np.ndarray)
        or arr.dtype != dt
        or arr.ndim != 1
        or not arr.flags.c_contiguous
        or not arr.flags.writeable
    ):
        raise ValueError(f"{name} must be a writable contiguous 1-D {dt} numpy array")
    if len(arr) < n:
        raise ValueError(f"{name} holds {len(arr)} elements but {n} are required")
    return arr


def _as_rows(rows: Any, n_rows: int) -> np.ndarray:
    """``rows`` as int64 row indices, as numpy means them (a boolean mask of ``n_rows`` entries selects; floats
    are a ``TypeError``): :func:`deltacells._indices.cell_indices` over a tile's rows."""
    return cell_indices(rows, n_rows, what="row")


def row_offsets(indptr: np.ndarray, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """The int64 row offsets (``len(rows) + 1`` entries from 0) of gathering ``rows`` of a CSR matrix whose row
    offsets are ``indptr``. Raises ``IndexError`` for a row outside the matrix."""
    ip = np.ascontiguousarray(indptr, dtype=np.int64)
    return _core.row_offsets(ip, _as_rows(rows, max(0, len(ip) - 1)))


@dataclass
class SparseBatch:
    """Rows of a dataset in CSR form, in the order they were asked for.

    ``indptr`` is int64 (``n_rows + 1`` entries), ``indices`` int32 (gene indices in stored column order,
    increasing within each row), ``values`` float32 or int32 counts.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    n_genes: int

    @property
    def n_rows(self) -> int:
        """Rows (cells)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """Stored nonzeros."""
        return int(self.indptr[-1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_genes)``."""
        return (self.n_rows, self.n_genes)

    def to_scipy(self) -> scipy.sparse.csr_matrix:
        """The batch as a ``scipy.sparse.csr_matrix`` (sharing the value and index arrays where scipy allows)."""
        import scipy.sparse as sp

        nnz = self.nnz
        return sp.csr_matrix((self.values[:nnz], self.indices[:nnz], self.indptr), shape=self.shape)

    def to_dense(self) -> np.ndarray:
        """The batch as a dense ``(n_rows, n_genes)`` numpy array of the values' dtype."""
        out = np.zeros(self.shape, dtype=self.values.dtype)
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        out[rows, self.indices[: self.nnz]] = self.values[: self.nnz]
        return out

    def to_torch_csr(self) -> torch.Tensor:
        """The batch as a torch sparse CSR tensor: int32 row offsets (a copy), column indices and values sharing
        memory with ``indices`` and ``values``. Raises ``OverflowError`` when nnz >= 2^31 (int32 offsets)."""
        import torch

        nnz = self.nnz
        if nnz >= 2**31:
            raise OverflowError("batch has too many nonzeros for int32 CSR indices")
        return torch.sparse_csr_tensor(
            torch.from_numpy(self.indptr.astype(np.int32)),
            torch.from_numpy(self.indices[:nnz]),
            torch.from_numpy(self.values[:nnz]),
            size=self.shape,
            check_invariants=False,
        )

    def to_torch_dense(self) -> torch.Tensor:
        """The batch as a dense torch tensor of the values' dtype."""
        import torch

        return torch.from_numpy(self.to_dense())


@dataclass
class DecodedTile:
    """A whole decoded tile in CSR form (``indptr`` int64, ``indices`` int32, ``values`` int32 or float32)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    n_genes: int

    @property
    def n_cells(self) -> int:
        """Cells (rows)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """Stored nonzeros."""
        return int(self.indptr[-1])

    def to_scipy(self) -> scipy.sparse.csr_matrix:
        """The tile as a ``scipy.sparse.csr_matrix`` of shape ``(n_cells, n_genes)``."""
        import scipy.sparse as sp

        nnz = self.nnz
        return sp.csr_matrix((self.values[:nnz], self.indices[:nnz], self.indptr), shape=(self.n_cells, self.n_genes))

    def gather(
        self,
        rows: Sequence[int] | np.ndarray,
        *,
        values_dtype: Any = np.float32,
        out_indices: np.ndarray | None = None,
        out_values: np.ndarray | None = None,
    ) -> SparseBatch:
        """The rows ``rows`` (any order, repeats allowed) as a :class:`SparseBatch`, into ``out_indices`` /
        ``out_values`` when given (the result's arrays are then views of them; nothing is written past nnz).
        Raises ``IndexError`` for a row outside the tile, ``ValueError`` for a bad buffer or for float32 values
        asked for as int32."""
        dt = as_values_dtype(values_dtype)
        r = _as_rows(rows, self.n_cells)
        ip = np.ascontiguousarray(self.indptr, dtype=np.int64)
        idx = np.ascontiguousarray(self.indices, dtype=np.int32)
        vals = np.ascontiguousarray(self.values)
        if out_indices is None and out_values is None:
            out_ip, oi, ov = _core.gather(ip, idx, vals, r, str(dt))
            return SparseBatch(out_ip, oi, ov, self.n_genes)
        offsets = _core.row_offsets(ip, r)
        nnz = int(offsets[-1])
        oi = np.empty(nnz, np.int32) if out_indices is None else _check_out(out_indices, "out_indices", nnz, np.int32)
        ov = np.empty(nnz, dt) if out_values is None else _check_out(out_values, "out_values", nnz, dt)
        out_ip, nnz = _core.gather(ip, idx, vals, r, str(dt), oi, ov)
        return SparseBatch(out_ip, oi[:nnz], ov[:nnz], self.n_genes)


class Tile:
    """A parsed tile (still compressed): its header and chunk table validated, its row offsets read.

    ``data`` may be ``bytes`` (shared, not copied), ``bytearray``, ``memoryview``, a uint8 numpy array (aligned or
    not) or an ``mmap`` (these are copied). The CRC-32 is checked too unless ``verify=False`` is given (``None``,
    the default, checks it): a flipped byte in a tile's streams may otherwise decode to valid but wrong counts.
    Versions 1 and 2. Any malformed tile raises :class:`~deltacells.format.FormatError` naming the rule and the
    byte offset.
    """

    def __init__(self, data: Any, *, verify: bool | None = None) -> None:
        if isinstance(data, (str, os.PathLike)):
            raise TypeError(f"a Tile is made of a tile's bytes, not of {type(data).__name__} {data!r}; read a tile "
                            "file with deltacells.read_tile(path)")
        core = data if isinstance(data, _core.Tile) else _core.Tile(data, verify is not False)
        self._core = core
        self.info: TileInfo = _tile_info(core.info())
        # Read-only: every decode of the tile hands this array out, and an edit through one would change the rest.
        self.indptr: np.ndarray = core.indptr()
        self.indptr.flags.writeable = False

    @classmethod
    def _from_core(cls, core: _core.Tile) -> Tile:
        return cls(core)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        # Pickled as its bytes, parsed (and its CRC checked) again where it is unpickled.
        return (Tile, (self._core.to_bytes(),))

    def to_bytes(self) -> bytes:
        """The tile's bytes (a copy), as they were read."""
        return bytes(self._core.to_bytes())

    @property
    def n_cells(self) -> int:
        """Cells."""
        return self.info.n_cells

    @property
    def n_genes(self) -> int:
        """Genes."""
        return self.info.n_genes

    @property
    def nnz(self) -> int:
        """Stored nonzeros."""
        return self.info.nnz

    @property
    def n_chunks(self) -> int:
        """Chunks."""
        return self.info.n_chunks

    @property
    def nbytes(self) -> int:
        """Size of the tile in bytes."""
        return int(self._core.nbytes)

    @property
    def version(self) -> int:
        """Format version of the tile (1 or 2)."""
        return self.info.version

    def verify(self) -> None:
        """Checks the CRC-32 of the payload; raises :class:`~deltacells.format.FormatError` if it differs."""
        self._core.verify()

    def decode(
        self,
        *,
        values: Any = np.int32,
        threads: int = 1,
        out_indices: np.ndarray | None = None,
        out_values: np.ndarray | None = None,
        scratch: np.ndarray | None = None,
        executor: Any = None,
    ) -> DecodedTile:
        """Decodes the whole tile (chunks on ``threads`` threads of the Rust decoder, the GIL released).

        ``values`` is int32 (the default) or float32. With ``out_indices`` / ``out_values`` (writable contiguous
        1-D arrays of at least nnz elements) the result's arrays are views of them. ``scratch`` and ``executor``
        are accepted for compatibility and not needed: the Rust decoder keeps its own scratch and threads.
        """
        dt = as_values_dtype(values)
        if int(threads) < 1:
            raise ValueError("threads must be at least 1")
        nnz = self.nnz
        oi = None if out_indices is None else _check_out(out_indices, "out_indices", nnz, np.int32)
        ov = None if out_values is None else _check_out(out_values, "out_values", nnz, dt)
        if scratch is not None and nnz > 0:
            need = max(1, min(int(threads), self.n_chunks)) * self.info.scratch_nbytes
            ok = isinstance(scratch, np.ndarray) and scratch.dtype == np.uint8 and scratch.flags.writeable
            if not ok or scratch.nbytes < need:
                raise ValueError(f"scratch must be a writable uint8 array of at least {need} bytes")
        # Each decode's indptr is its own copy (n_cells + 1 integers), writable as its indices and values are: the
        # tile's own stays read-only for every later decode.
        if oi is None and ov is None:
            idx, vals = self._core.decode(str(dt), int(threads))
            return DecodedTile(self.indptr.copy(), idx, vals, self.n_genes)
        oi = np.empty(nnz, np.int32) if oi is None else oi
        ov = np.empty(nnz, dt) if ov is None else ov
        n = self._core.decode(str(dt), int(threads), oi, ov)
        return DecodedTile(self.indptr.copy(), oi[:n], ov[:n], self.n_genes)

    def to_scipy(self, values: Any = np.float32, threads: int = 1) -> scipy.sparse.csr_matrix:
        """The decoded tile as a ``scipy.sparse.csr_matrix`` (float32 values by default)."""
        return self.decode(values=values, threads=threads).to_scipy()

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Tile(version={i.version}, n_cells={i.n_cells}, n_genes={i.n_genes}, nnz={i.nnz}, "
            f"n_chunks={i.n_chunks})"
        )


def read_tile(path: str | os.PathLike[str], *, verify: bool | None = None) -> Tile:
    """Reads and parses the tile file at ``path``, its CRC-32 checked unless ``verify=False`` is given."""
    return Tile(_core.read_tile_file(os.fspath(path), verify is not False))


# Public under `deltacells.reader`: help() and pickles name them there.
for _public in (DecodedTile, SparseBatch, Tile):
    _public.__module__ = "deltacells.reader"
del _public
