"""Reading a dataset's obs through the node-local column cache (``ObsStore``; ``deltacells.obs`` is the public
face)."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from deltacells import _core
from deltacells._indices import cell_indices
from deltacells._obs_schema import ObsSchema, resolve_cache_dir
from deltacells.manifest import Manifest

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["ObsHost", "ObsStore"]

log = logging.getLogger("deltacells.obs")


class ObsHost(Protocol):
    """What an ``ObsStore`` reads through: a ``DeltaCellsDataset`` (its Rust reader, manifest, backend and cache
    directory)."""

    cache_dir: str | None
    manifest: Manifest

    @property
    def _core(self) -> Any: ...

    @property
    def backend(self) -> Any: ...


class ObsStore:
    """A dataset's obs, read through the node-local column cache (``ds.obs``).

    ``localize(columns)`` copies the columns' chunks from the shards into ``cache_dir`` (ranged reads only, under a
    lock, once per node; further columns can be added any time); ``take(indices, columns)`` then looks cells up
    in the memory-mapped cache files without touching the dataset.
    """

    def __init__(self, dataset: ObsHost, *, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self._dataset = dataset
        self._cache = cache_dir if cache_dir is not None else dataset.cache_dir
        self._reader: Any = None
        self._pid = -1
        self._opening = threading.Lock()
        self.manifest = dataset.manifest
        self.cache_root: Path = resolve_cache_dir(self._cache)
        self._schema: ObsSchema | None = None

    @classmethod
    def _of_dataset(cls, dataset: ObsHost) -> ObsStore:
        return cls(dataset)

    def _r(self) -> Any:
        """The reader of this process, opened once however many threads ask at once. A caller that needs one reader
        for several steps (localize, then take) keeps what this returns: ``close()`` in another thread may drop it
        from here meanwhile, and a reader opened again has none of the columns mapped."""
        with self._opening:
            if self._reader is None or self._pid != os.getpid():
                cache = os.fspath(self._cache) if self._cache is not None else None
                self._reader = self._dataset._core.obs(cache)
                self._pid = os.getpid()
            return self._reader

    @property
    def _readers(self) -> dict[str, bool]:
        # The original package's map of open memory maps: truthy once a column is mapped in this process.
        if self._reader is None or self._pid != os.getpid():
            return {}
        return {c: True for c in self.columns if self._reader.is_localized(c)}

    def __getstate__(self) -> dict[str, Any]:
        return {"_dataset": self._dataset, "_cache": self._cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_dataset"], cache_dir=state["_cache"])  # type: ignore[misc]

    def close(self) -> None:
        """Releases the memory maps (they are reopened on demand; a read under way in another thread keeps its
        own until it ends)."""
        with self._opening:
            self._reader = None

    @property
    def backend(self) -> Any:
        """The dataset's backend."""
        return self._dataset.backend

    @property
    def schema(self) -> ObsSchema:
        """The obs schema (``obs/schema.json``)."""
        if self._schema is None:
            self._schema = ObsSchema.from_json(self._r().schema_json())
        return self._schema

    @property
    def columns(self) -> list[str]:
        """Column names, in schema order."""
        return self.schema.names

    @property
    def cache_dir(self) -> Path:
        """This dataset's cache directory (``cache_root/<obs fingerprint>/obs``): datasets with other obs content
        get others; copies of one dataset share it."""
        return Path(self._r().cache_dir())

    def _path(self, column: str) -> Path:
        return self.cache_dir / _core.column_file_name(column)

    def _check_columns(self, columns: str | Sequence[str] | None) -> list[str]:
        if columns is None:
            return self.columns
        cols = [columns] if isinstance(columns, str) else list(columns)
        unknown = [c for c in cols if c not in self.schema]
        if unknown:
            raise KeyError(f"unknown obs columns {unknown}; available: {self.columns}")
        return cols

    def kind(self, column: str) -> str:
        """The kind of ``column``: ``category``, ``numeric``, ``bool`` or ``string``."""
        return self.schema[column].kind

    def categories(self, column: str) -> list[str]:
        """The global vocabulary of a category column (``ValueError`` for another kind)."""
        c = self.schema[column]
        if c.kind != "category":
            raise ValueError(f"column {column!r} is not categorical (kind {c.kind!r})")
        return list(c.categories or [])

    def localized_columns(self) -> list[str]:
        """The columns present in the local cache, in schema order."""
        return [c for c in self.columns if self._path(c).exists()]

    def localize(self, columns: str | Sequence[str] | None = None, *, threads: int | None = None) -> list[str]:
        """Makes ``columns`` (default: all) local; returns the columns it fetched (``[]`` when all were cached).
        Only ranged reads of their column chunks (and the shards' footers) are made. ``threads`` is accepted for
        compatibility: requests run concurrently in the Rust reader."""
        cols = self._check_columns(columns)
        if not cols:
            return []
        fetched, _cached, rebuilt = self._r().localize(cols)
        if fetched or rebuilt:
            log.info("localized obs columns %s to %s", fetched + rebuilt, self.cache_dir)
        return list(fetched) + list(rebuilt)

    def _ensure_local(self, cols: list[str], warn: bool) -> Any:
        """The reader, with ``cols`` mapped in it (fetched first if needed)."""
        r = self._r()
        missing = [c for c in cols if not r.is_localized(c)]
        if not missing:
            return r
        absent = [c for c in missing if not self._path(c).exists()]
        if absent and warn:
            warnings.warn(
                f"obs columns {absent} are not in the local cache ({self.cache_dir}); fetching them now. Call "
                "dataset.obs.localize([...]) (or pass obs_columns=...) up front to avoid this stall.",
                UserWarning,
                stacklevel=3,
            )
        r.localize(missing)
        return r

    def take(
        self, indices: Sequence[int] | np.ndarray, columns: str | Sequence[str], *, warn: bool = True
    ) -> dict[str, np.ndarray]:
        """The values of ``columns`` at global cells ``indices`` (any order, repeats allowed), in request order.

        Category columns come as their int8/16/32 codes (-1 for missing; labels: :meth:`categories`), numbers in
        their stored dtype (float64 with NaN when the column has missing values, in every batch whether or not its
        cells have some, so that a column's dtype never changes); codes and numbers of columns without missing
        values are the buffers the reader built, handed to numpy without a copy (writable; never the cache itself).
        Booleans come as bool arrays, strings (and booleans of columns with missing values) as object arrays with
        ``None``. ``indices``
        are integers or a boolean mask with one entry per cell, as in numpy. Columns not local yet are fetched
        first, with a ``UserWarning`` unless ``warn=False``.
        """
        cols = self._check_columns(columns)
        idx = cell_indices(indices, self.manifest.n_cells)
        got = self._ensure_local(cols, warn).take(idx, cols)
        return {c: _as_numpy(got[c]) for c in cols}

    def take_pandas(
        self, indices: Sequence[int] | np.ndarray, columns: str | Sequence[str], *, warn: bool = True
    ) -> pd.DataFrame:
        """:meth:`take` as a pandas DataFrame (default index); category columns are pandas categoricals with the
        global vocabulary, so every batch has the same categories."""
        import pandas as pd

        cols = self._check_columns(columns)
        got = self.take(indices, cols, warn=warn)
        return pd.DataFrame({c: self._pandas_column(c, got[c]) for c in cols})

    def _pandas_column(self, c: str, values: np.ndarray, categorical: bool = True) -> Any:
        import pandas as pd

        spec = self.schema[c]
        if spec.kind != "category":
            return values
        dtype = pd.CategoricalDtype(list(spec.categories or []), ordered=spec.ordered)
        cat = pd.Categorical.from_codes(values.astype(np.int64), dtype=dtype)
        if categorical:
            return cat
        return np.asarray(cat.astype(object), dtype=object)

    def to_pandas(self, columns: str | Sequence[str] | None = None, *, categorical: bool = True) -> pd.DataFrame:
        """Every cell of ``columns`` (default: all) as a pandas DataFrame with a RangeIndex; missing columns are
        localized first (without a warning). ``categorical=False`` gives category columns as their labels, the way
        pandas holds strings (object before pandas 3, its string dtype since)."""
        import pandas as pd

        cols = self._check_columns(columns)
        got = self._ensure_local(cols, warn=False).table(cols)
        return pd.DataFrame({c: self._pandas_column(c, _as_numpy(got[c]), categorical) for c in cols})

    def column_nbytes(self) -> dict[str, int]:
        """Compressed bytes of each column over all shards (from the shard footers)."""
        return {name: int(compressed) for name, compressed, _ in self._r().column_sizes()}

    def verify(self) -> None:
        """Reads every shard and checks its size and SHA-256, its layout against the tiles and the schema, and the
        fingerprint. ``FileNotFoundError`` for a missing shard, :class:`~deltacells.format.FormatError` (a
        ``ValueError``) naming every other problem (a changed shard: "checksum mismatch")."""
        try:
            self._r().verify()
        except ValueError as e:
            text = str(e)
            if "SHA-256" in text or "sha256" in text or "size" in text:
                raise type(e)(f"{text} (checksum mismatch: the file changed or is corrupt)") from None
            raise

    def warmup(self) -> None:
        """Nothing to warm up: lookups run in Rust (kept for compatibility)."""


def _as_numpy(v: Any) -> np.ndarray:
    if isinstance(v, list):
        out = np.empty(len(v), dtype=object)
        out[:] = v
        return out
    return v


# Public under `deltacells.obs`: help() and pickles name it there.
ObsStore.__module__ = "deltacells.obs"
