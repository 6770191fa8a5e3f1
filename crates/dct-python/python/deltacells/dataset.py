"""Random access to the cells of a dataset: :class:`DeltaCellsDataset`, the Rust reader behind the original API."""

from __future__ import annotations

import hashlib
import json
import operator
import os
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells import _core
from deltacells._args import int_argument
from deltacells._indices import cell_indices
from deltacells._obs_schema import _var_frame
from deltacells._obs_store import ObsStore
from deltacells._tiles import SparseBatch, Tile, _check_out, as_values_dtype
from deltacells.backends import Backend, GCSBackend, LocalBackend, StoreBackend, backend_or_path, open_backend
from deltacells.manifest import Manifest
from deltacells.timeline import Timeline

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from deltacells.report import Report


__all__ = ["DeltaCellsDataset", "open_dataset"]


def _native(backend: Any) -> tuple[str, dict[str, str] | None] | None:
    """The store URL and options the Rust reader opens directly for one of this package's own backends (not
    subclasses, which may change how objects are read), else ``None``: the reader then reads through the object's
    methods."""
    if type(backend) is LocalBackend:
        return backend.root, None
    if type(backend) is StoreBackend:
        return backend.url, backend.storage_options
    if type(backend) is GCSBackend and backend._client is None:
        return backend.describe(), None
    return None


def _manifest_digest(manifest_json: str) -> str:
    """A digest of a dataset's manifest: equal digests, the same tiles and cells."""
    return hashlib.sha256(manifest_json.encode()).hexdigest()


def _check_reader_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        int_argument(name, value, 1)



def _absolute_if_local(uri: Backend | str) -> Backend | str:
    """A local path made absolute; a URL or a backend as it is."""
    if isinstance(uri, str) and "://" not in uri:
        return os.path.abspath(uri)
    return uri

class _SharedThreads:
    """Threads that several readers run on (an I/O runtime and a decode pool), made in each process that uses
    them: the members of a corpus share one set, so that a corpus of a thousand members does not start a thousand
    of each (in every DataLoader worker too)."""

    def __init__(self, io_threads: int = 4, decode_threads: int = 1) -> None:
        self.io_threads, self.decode_threads = int(io_threads), int(decode_threads)
        self._lock = threading.Lock()
        self._threads: Any = None
        self._pid = -1

    def get(self) -> _core.ReaderThreads:
        """This process's threads (made on first use, and again in a forked child)."""
        with self._lock:
            if self._threads is None or self._pid != os.getpid():
                self._threads = _core.ReaderThreads(self.io_threads, self.decode_threads)
                self._pid = os.getpid()
            return self._threads

    def __reduce__(self) -> tuple[Any, tuple[int, int]]:
        return (_SharedThreads, (self.io_threads, self.decode_threads))


class DeltaCellsDataset:
    """Random access to the cells of a deltacells dataset (format version 1 or 2), for training loops and
    ``DataLoader`` workers.

    ``get_batch`` takes global cell indices (any order, repeats, any tiles) and returns a CSR :class:`SparseBatch`
    in that order. Whole tiles are fetched (one GET each; on object storage, a tile larger than 8 MiB comes as
    concurrent ranged GETs of its parts, the store option ``part_bytes``), checked against the manifest and
    decoded by the Rust reader; decoded tiles are kept in a cache (the least recently used evicted first, or in the
    order the caller gives with :meth:`plan_passes`), and ``prefetch`` starts fetching and decoding the tiles the
    caller will need next in the background.

    Args:
        uri: a local path, ``file://``, ``s3://``, ``gs://``, ``az://`` / ``abfs(s)://`` or ``http(s)://`` URL
            (credentials from the environment, as for the CLI), or a :class:`~deltacells.backends.Backend` object.
        max_cached_tiles: decoded tiles kept (about 4 bytes per nonzero each).
        max_prefetch_tiles: prefetched tiles being fetched, or fetched and waiting to be decoded.
        io_threads: threads running storage requests (they are asynchronous: a few keep many in flight).
        decode_threads: threads decoding one tile's chunks and filling a batch. With 1, each call decodes on its
            own thread, so calls from several Python threads run in parallel.
        verify: check each tile's CRC-32 when it is fetched. On unless ``False`` is given: without it a flipped
            bit in a tile's streams can decode to valid but wrong counts (the original package's default was off;
            the check costs a few percent of a cold tile's read, see ``docs/BENCHMARKS.md``).
        cache_dir: where obs columns are cached (default ``$DELTACELLS_CACHE``, ``$XDG_CACHE_HOME/deltacells`` or
            ``~/.cache/deltacells``).
        obs_columns: obs columns to make local at once (``KeyError`` for an unknown one, ``ValueError`` without
            obs).
        storage_options: extra store options (``object_store`` keys, as ``--store-option`` of the CLI).

    Defaults: the reader settings above default to the original package's documented values (2 cached tiles, 8
    prefetched, 4 I/O threads, 1 decode thread), so scripts written against it behave as they did. The Rust reader's
    own defaults (``dct_dataset::ReadOptions::default``, used by the CLI and Rust callers) are larger, and the
    training loader sizes the reader from its memory budget instead (``dct_dataset::TileBudget``).

    Beyond the original package: ``get_batch`` releases the GIL for fetching, decoding and gathering and may be
    called from many Python threads at once; arrays are handed to numpy without copying. The object pickles to
    what is needed to reopen it (and reopens lazily), so it can go to ``multiprocessing`` and ``DataLoader``
    workers; a worker started by ``fork`` opens its own reader on first use. A reader opened again (in another
    process, or after :meth:`close`) must find the manifest this object first read: if the dataset was appended to
    or written again in between, :class:`~deltacells.DatasetChangedError` says so instead of reading other cells
    under the same indices.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str] | Backend,
        *,
        max_cached_tiles: int = 2,
        max_prefetch_tiles: int = 8,
        io_threads: int = 4,
        decode_threads: int = 1,
        verify: bool | None = None,
        cache_dir: str | None = None,
        obs_columns: Sequence[str] | None = None,
        storage_options: dict[str, str] | None = None,
        _threads: _SharedThreads | None = None,
    ) -> None:
        _check_reader_sizes(max_cached_tiles=max_cached_tiles, max_prefetch_tiles=max_prefetch_tiles,
                            io_threads=io_threads, decode_threads=decode_threads)
        self._uri = backend_or_path(uri)  # a Backend (or an object with its methods), or a path or URL
        # Where it is opened (again in a worker, after close()): a relative path made absolute now, so that the
        # working directory changed since (as Hydra changes it) does not name another folder.
        self._location = _absolute_if_local(self._uri)
        self.max_cached_tiles = int(max_cached_tiles)
        self.max_prefetch_tiles = int(max_prefetch_tiles)
        self.io_threads = int(io_threads)
        self.decode_threads = int(decode_threads)
        self.verify = True if verify is None else bool(verify)
        self.cache_dir = cache_dir
        self.storage_options = dict(storage_options) if storage_options else None
        # Threads this one's Rust reader runs on, shared with other readers (the members of a corpus).
        self._threads = _threads
        self._init_runtime()
        core = self._core  # opens now: the manifest is read and checked at once
        manifest_json = core.manifest_json()
        # What this object's cell layout is: a reader opened again (in another process, or after close) must find
        # the same manifest, or it would read other cells under the same indices.
        self._manifest_digest = _manifest_digest(manifest_json)
        self.manifest: Manifest = Manifest.from_json(manifest_json)
        self._limits = _read_only(np.asarray(core.limits(), dtype=np.int64))
        self._starts = _read_only(np.concatenate([[0], self._limits[:-1]]).astype(np.int64))
        if obs_columns:
            if self.obs is None:
                raise ValueError("obs_columns were given but the dataset has no obs")
            self.obs.localize([obs_columns] if isinstance(obs_columns, str) else list(obs_columns))

    # ------------------------------------------------------------------ lifecycle

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._reader: Any = None
        self._pid = -1
        self._backend: Backend | None = None
        self._obs: ObsStore | None = None
        self._var: pd.DataFrame | None = None
        self._var_names: list[str] | None = None
        self._gene_order: np.ndarray | None = None

    @property
    def _core(self) -> _core.Dataset:
        """The Rust reader of this process (opened on first use, and again in a forked child)."""
        reader = self._reader
        if reader is not None and self._pid == os.getpid():
            return reader
        with self._lock:
            if self._reader is None or self._pid != os.getpid():
                uri = self._location
                native = (uri, None) if isinstance(uri, str) else _native(uri)
                url, options = native if native is not None else (None, None)
                # The backend's own options first; those given to the dataset win where both name a key.
                if options or self.storage_options:
                    options = {**(options or {}), **(self.storage_options or {})}
                sharing = self.__dict__.get("_threads")
                reader = _core.Dataset(
                    url,
                    None if url is not None else uri,
                    self.max_cached_tiles,
                    self.max_prefetch_tiles,
                    self.io_threads,
                    self.decode_threads,
                    self.verify,
                    options,
                    None if sharing is None else sharing.get(),
                )
                expected = self.__dict__.get("_manifest_digest")
                if expected is not None and _manifest_digest(reader.manifest_json()) != expected:
                    raise _changed(url if url is not None else repr(uri))
                self._reader = reader
                self._pid = os.getpid()
                self._obs = None
            return self._reader

    def __getstate__(self) -> dict[str, Any]:
        keep = ("_uri", "_location", "manifest", "max_cached_tiles", "max_prefetch_tiles", "io_threads",
                "decode_threads")
        state = {k: self.__dict__[k] for k in keep}
        state.update(verify=self.verify, cache_dir=self.cache_dir, storage_options=self.storage_options)
        state.update(_limits=self._limits, _starts=self._starts, _manifest_digest=self._manifest_digest)
        # Shared threads go along (made anew in the process that unpickles them, once for every reader that
        # shares them in one pickle): a spawned DataLoader worker's corpus members share one set too.
        state.update(_threads=self.__dict__.get("_threads"))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._limits, self._starts = _read_only(self._limits), _read_only(self._starts)
        self._init_runtime()

    def reopened(
        self,
        *,
        max_cached_tiles: int | None = None,
        max_prefetch_tiles: int | None = None,
        io_threads: int | None = None,
        decode_threads: int | None = None,
        verify: bool | None = None,
    ) -> DeltaCellsDataset:
        """The same dataset with other reader settings (those not given are kept), on the manifest this one has
        read: no request is sent. For sizing the cache from the manifest without a second round trip to the
        store. The new dataset has its own cache and counters; this one stays open."""
        given = {"max_cached_tiles": max_cached_tiles, "max_prefetch_tiles": max_prefetch_tiles,
                 "io_threads": io_threads, "decode_threads": decode_threads}
        _check_reader_sizes(**{k: v for k, v in given.items() if v is not None})
        other = DeltaCellsDataset.__new__(DeltaCellsDataset)
        other.__setstate__(self.__getstate__())
        other._threads = None  # threads of its own, as its settings say
        other.__dict__.update({k: int(v) for k, v in given.items() if v is not None})
        if verify is not None:
            other.verify = bool(verify)
        core = self._core.reopened(other.max_cached_tiles, other.max_prefetch_tiles, other.io_threads,
                                   other.decode_threads, other.verify)
        other._reader, other._pid = core, os.getpid()
        return other

    def close(self) -> None:
        """Stops the reader's threads and drops its caches (idempotent); the dataset reopens on next use."""
        with self._lock:
            self._reader = None
            if self._obs is not None:
                self._obs.close()
            self._obs = None

    def __enter__(self) -> DeltaCellsDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"DeltaCellsDataset({self.uri!r}, n_cells={self.n_cells}, n_genes={self.n_genes}, "
            f"n_tiles={self.n_tiles})"
        )

    # ------------------------------------------------------------------ metadata

    @property
    def uri(self) -> str:
        """Where the dataset is (as given, or the backend's description)."""
        return self._uri if isinstance(self._uri, str) else self._uri.describe()

    @property
    def backend(self) -> Backend:
        """The :class:`~deltacells.backends.Backend` the dataset is read from (made from the URI when one was
        given)."""
        if self._backend is None:
            self._backend = open_backend(self._location, storage_options=self.storage_options)
        return self._backend

    @property
    def n_cells(self) -> int:
        """Cells."""
        return self.manifest.n_cells

    @property
    def n_genes(self) -> int:
        """Genes."""
        return self.manifest.n_genes

    @property
    def n_tiles(self) -> int:
        """Tiles."""
        return self.manifest.n_tiles

    @property
    def tile_size(self) -> int:
        """Cells per tile (all tiles but the last)."""
        return self.manifest.tile_size

    @property
    def limits(self) -> np.ndarray:
        """Cumulative cells per tile (int64, read-only): ``limits[i]`` cells lie in tiles ``0..=i``."""
        return self._limits

    def __len__(self) -> int:
        """The number of cells (``n_cells``)."""
        return self.n_cells

    def tile_bounds(self, i: int) -> tuple[int, int]:
        """Global ``(start, stop)`` cell indices of tile ``i``."""
        if not 0 <= int(i) < self.n_tiles:
            raise IndexError(f"tile {i} out of range")
        return int(self._starts[i]), int(self._limits[i])

    def tile_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The tile of each global cell index (``searchsorted(limits, idx, side="right")``)."""
        return np.searchsorted(self._limits, np.asarray(indices, dtype=np.int64), side="right")

    @property
    def stats(self) -> dict[str, float]:
        """Counters since opening: ``tiles_fetched``, ``fetch_seconds``, ``stall_seconds``, ``tiles_decoded``,
        ``decode_seconds``, ``tile_cache_hits`` (reads that joined a fetch or prefetch in flight),
        ``decoded_cache_hits`` (reads that found the tile decoded), plus ``bytes_fetched``, ``failed_loads``,
        ``cache_misses`` and ``prefetched``."""
        return dict(self._core.stats())

    def reset_stats(self) -> None:
        """Sets every counter to zero."""
        self._core.reset_stats()

    @property
    def var_names(self) -> list[str] | None:
        """Gene names in stored column order (``None`` if the dataset has none); a new list each time, so that
        changing it leaves the dataset's own as it is."""
        if self._var_names is None and self.manifest.has_var_names:
            self._var_names = self._core.var_names()
        return None if self._var_names is None else list(self._var_names)

    @property
    def gene_order(self) -> np.ndarray | None:
        """int32, read-only: stored column ``j`` was source column ``gene_order[j]`` (``None`` if genes were not
        reordered)."""
        if self._gene_order is None and self.manifest.has_gene_order:
            order = self._core.gene_order()
            self._gene_order = None if order is None else _read_only(order)
        return self._gene_order

    @property
    def var(self) -> pd.DataFrame | None:
        """The gene table as a pandas DataFrame in stored column order, with its stored index (``None`` if the
        dataset has none; needs pandas). Read once."""
        if self._var is None and self.manifest.has_var_table:
            self._var = _var_frame(self._core.var_table(), f"{self._core.url()}/var.parquet")
        return self._var

    @property
    def obs(self) -> ObsStore | None:
        """The per-cell metadata as a :class:`deltacells.obs.ObsStore` (``None`` if the dataset has none).

        Obs is never fetched with the tiles: ``obs.localize(columns)`` copies those columns into the node-local cache
        (ranged reads, once per node), after which ``obs.take(indices, columns)`` is a memory-mapped lookup.
        """
        if not self.manifest.has_obs:
            return None
        if self._obs is None:
            self._obs = ObsStore._of_dataset(self)
        return self._obs

    def report(
        self,
        *,
        sample_tiles: int = 24,
        bench: str | os.PathLike[str] | dict[str, Any] | Timeline | None = None,
        title: str | None = None,
    ) -> Report:
        """The dataset's report, as ``deltacells report`` writes it: a :class:`deltacells.report.Report` that
        shows inline in Jupyter and ``.save(path)`` writes as one self-contained HTML page.

        The page holds the manifest's facts; histograms of nonzeros and counts per cell; tile bytes and bytes per
        nonzero per tile; chunk balance within tiles; gene totals by rank; per obs column its categories (top 30)
        or a histogram, and its missing fraction; and, given ``bench`` (the output of ``deltacells bench --json``,
        or a loader's :class:`deltacells.Timeline`, its ``to_json()``: a file, or the dict), the read's throughput
        and batch times. At most ``sample_tiles`` tiles, evenly
        spread, are decoded (the page says how many). Runs without the GIL."""
        from deltacells.report import Report

        text: str | None
        if bench is None:
            text = None
        elif isinstance(bench, dict):
            text = json.dumps(bench)
        elif isinstance(bench, Timeline):
            text = json.dumps(bench.to_json())
        else:
            with open(os.fspath(bench), encoding="utf-8") as f:
                text = f.read()
        sample_tiles = int_argument("sample_tiles", sample_tiles, 1)
        return Report._from_core(_core.dataset_report(self._core, sample_tiles, text, title, self.cache_dir))

    # ------------------------------------------------------------------ reading

    def _as_indices(self, indices: Any) -> np.ndarray:
        return cell_indices(indices, self.n_cells)

    def get_batch(
        self,
        indices: Sequence[int] | np.ndarray | Iterable[int],
        *,
        values_dtype: Any = np.float32,
        out_indices: np.ndarray | None = None,
        out_values: np.ndarray | None = None,
    ) -> SparseBatch:
        """The cells ``indices`` (global, any order, repeats allowed, across tiles) as a CSR :class:`SparseBatch`
        in that order; columns in stored order: stored column ``j`` is source column ``ds.gene_order[j]``, so the
        source's order is ``X[idx][:, np.argsort(ds.gene_order)]``. ``indices`` may also be a boolean mask with one
        entry per cell, as in numpy; floats are a ``TypeError``.

        ``values_dtype`` is float32 (default) or int32. With ``out_indices`` / ``out_values`` (writable contiguous
        1-D arrays of at least nnz elements, e.g. shared-memory or pinned tensors' ``.numpy()``) the batch's arrays
        are views of them; :meth:`batch_nnz` gives the size beforehand. Raises ``IndexError`` for a cell outside
        the dataset.
        """
        dt = as_values_dtype(values_dtype)
        idx = self._as_indices(indices)
        core = self._core
        if out_indices is None and out_values is None:
            indptr, ix, vals = core.get_batch(idx, str(dt))
            return SparseBatch(indptr, ix, vals, self.n_genes)
        if out_indices is None or out_values is None:
            nnz = int(core.batch_nnz(idx))
            oi = (
                np.empty(nnz, np.int32) if out_indices is None
                else _check_out(out_indices, "out_indices", nnz, np.int32)
            )
            ov = np.empty(nnz, dt) if out_values is None else _check_out(out_values, "out_values", nnz, dt)
        else:
            oi = _check_out(out_indices, "out_indices", 0, np.int32)
            ov = _check_out(out_values, "out_values", 0, dt)
        indptr, nnz = core.get_batch(idx, str(dt), oi, ov)
        return SparseBatch(indptr, oi[:nnz], ov[:nnz], self.n_genes)

    def _fill_slot(self, cells: np.ndarray, values: str, slots: list[np.ndarray]) -> tuple[int, int, int, None]:
        """The rows of ``cells`` (int64) read into the first of ``slots`` (uint8 views of slots past their headers)
        that holds them, planned once: ``(slot, nnz, used, None)``, ``slot`` -1 (nothing written) when none does
        and the batch needs a slot of ``used`` bytes (see ``_batch_slots``)."""
        return (*self._core.fill_slot(np.ascontiguousarray(cells, np.int64), values, slots), None)

    def batch_nnz(self, indices: Sequence[int] | np.ndarray) -> int:
        """Nonzeros :meth:`get_batch` would return for ``indices`` (tiles fetched, not decoded): the size of output
        buffers to allocate beforehand."""
        return int(self._core.batch_nnz(self._as_indices(indices)))

    def __getitem__(self, key: Any) -> SparseBatch:
        """``ds[i]`` (one cell; negative counts from the end), ``ds[a:b:c]``, or ``ds[cells]`` (integers or a
        boolean mask, as :meth:`get_batch` takes them): a :class:`~deltacells.SparseBatch` in request order.
        ``IndexError`` for what numpy reads otherwise (a boolean scalar, a tuple of axes, indices of two
        dimensions)."""
        if isinstance(key, (bool, np.bool_)) or (getattr(key, "ndim", None) == 0 and _is_bool(key)):
            # numpy takes a boolean scalar as a new axis, not as cell 0 or 1.
            raise IndexError(f"a boolean ({key!r}) is not a cell index; a mask selects with one entry per cell")
        if isinstance(key, tuple):
            raise IndexError(f"too many indices: a dataset is indexed by cells (ds[cells]), not by {len(key)} axes; "
                             "select genes on the batch (ds[cells].to_scipy()[:, genes])")
        if isinstance(key, (int, np.integer)) or (getattr(key, "ndim", None) == 0 and _is_index(key)):
            # Negative keys count from the end, as in numpy (a 0-d integer array or tensor is a key too); the
            # reader checks the range.
            k = operator.index(key)
            if -self.n_cells <= k < 0:
                k += self.n_cells
            return self.get_batch([k])
        if isinstance(key, slice):
            return self.get_batch(np.arange(*key.indices(self.n_cells)))
        return self.get_batch(key)

    def prefetch(self, tile_ids: Iterable[int]) -> int:
        """Starts fetching and decoding tiles in the background (returns at once; tiles cached or in flight are
        skipped). Returns the number of tiles whose loading started. ``IndexError`` for a tile that does not
        exist."""
        ids = list(dict.fromkeys(int(t) for t in tile_ids))
        for t in ids:
            if not 0 <= t < self.n_tiles:
                raise IndexError(f"tile {t} out of range")
        return int(self._core.prefetch(ids)) if ids else 0

    def plan_passes(self, this_pass: Iterable[int], next_pass: Iterable[int]) -> None:
        """Tells the tile cache the order in which the pass beginning now and the one after it (a training loop's
        epoch and the next) first read the tiles, replacing any orders given before. When the cache is full, of
        the tiles no batch still needs it evicts first those neither pass reads, then the one read last from now
        on, rather than the least recently used: with a new shuffle each epoch, a cache holding ``C`` of ``N``
        tiles then decodes about ``N - C`` tiles an epoch instead of nearly ``N``. The training loader gives them
        at the start of each epoch, from the epoch's plan and the next one's; a wrong order costs only cache hits.
        ``IndexError`` for a tile that does not exist."""
        self._core.plan_passes([int(t) for t in this_pass], [int(t) for t in next_pass])

    def prefetch_cells(self, indices: Sequence[int] | np.ndarray) -> int:
        """:meth:`prefetch` of the tiles holding the given global cells; ``IndexError`` naming a cell out of range."""
        idx = self._as_indices(indices)
        if len(idx) == 0:
            return 0
        outside = np.flatnonzero((idx < 0) | (idx >= self.n_cells))
        if len(outside):
            at = int(outside[0])
            raise IndexError(f"cell {int(idx[at])} (position {at} of the request) is out of range: there are "
                             f"{self.n_cells} cells")
        return self.prefetch(self.tile_of(idx).tolist())

    def get_tile(self, i: int) -> Tile:
        """The parsed, still compressed tile ``i`` (fetched now and checked against the manifest)."""
        if not 0 <= int(i) < self.n_tiles:
            raise IndexError(f"tile {i} out of range")
        return Tile._from_core(self._core.get_tile(int(i), self.verify))


def open_dataset(uri: str | os.PathLike[str] | Backend, **kwargs: Any) -> DeltaCellsDataset:
    """Opens a dataset: ``DeltaCellsDataset(uri, **kwargs)``."""
    return DeltaCellsDataset(uri, **kwargs)


def _changed(where: str) -> Exception:
    """The error for a dataset whose manifest is not the one it was opened with."""
    return _core.DatasetChangedError(
        f"dataset {where} changed since it was opened (its manifest is another now: it was appended to, merged "
        "into or written again), so its cells may sit under other indices; open it again to read it as it is now"
    )


def _is_bool(key: Any) -> bool:
    """Whether ``key`` has a boolean dtype (numpy's or torch's)."""
    return getattr(key, "dtype", None) is not None and str(key.dtype).rsplit(".", 1)[-1] == "bool"


def _is_index(key: Any) -> bool:
    """Whether ``key`` is an integer in Python's sense (``operator.index`` takes it): a 0-d integer numpy array or
    torch tensor is, a float or boolean one is not."""
    if _is_bool(key):
        return False
    try:
        operator.index(key)
    except TypeError:
        return False
    return True


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a``, no longer writable: an array the dataset keeps and hands out (its tile limits, its gene order)."""
    a.flags.writeable = False
    return a
