"""Where a dataset's objects are read from: backends with ``read``, ``read_range``, ``size``, ``exists`` and
``describe``.

A dataset opened from a URL is read by the Rust stores directly. A :class:`Backend` object works too: this
package's own backends (:class:`LocalBackend`, :class:`StoreBackend`, :class:`GCSBackend` without a client) are
opened natively by the Rust reader; any other backend (a subclass, a wrapper such as :class:`CountingBackend` or
:class:`ThrottledBackend`, or a duck-typed object of the user's) is read through its methods, one call per tile
and ranged calls for obs.
"""

from __future__ import annotations

import atexit
import errno
import io
import os
import random
import stat
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

from deltacells import _core

# A read of a Python backend still running when the interpreter exits (a prefetch in flight after the last batch)
# would be ended by Python in a way that aborts the process: at exit, new reads are refused and those running are
# waited for.
atexit.register(_core.stop_backend_calls, 30.0)

__all__ = [
    "Backend",
    "CountingBackend",
    "GCSBackend",
    "LocalBackend",
    "RangeFile",
    "StoreBackend",
    "ThrottledBackend",
    "as_backend",
    "backend_or_path",
    "open_backend",
]


class Backend(ABC):
    """Read-only access to the named objects of a dataset (``manifest.json``, ``tiles/tile_000000.dct``, ...).

    What a read raises decides what the reader does: ``FileNotFoundError`` (or a mapping's ``KeyError``) is a
    missing object; ``PermissionError``, ``TypeError``, ``ValueError``, ``AttributeError`` and
    ``NotImplementedError`` (or an answer that is not bytes-like) are final and reported at once; anything else (a
    connection reset, a timeout, an ``OSError``) is retried with backoff, as a network failure is."""

    @abstractmethod
    def read(self, name: str) -> Any:
        """The whole object ``name`` (bytes-like). Raises ``FileNotFoundError`` if it does not exist."""

    @abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the object ``name`` exists."""

    def size(self, name: str) -> int:
        """The size of ``name`` in bytes (this default reads the whole object)."""
        return len(memoryview(self.read(name)).cast("B"))

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``name`` from ``offset`` (fewer at the end, ``b""`` past it). This default reads the
        whole object."""
        if length <= 0:
            return b""
        return bytes(memoryview(self.read(name)).cast("B")[offset : offset + length])

    def describe(self) -> str:
        """A short description for messages."""
        return type(self).__name__


class _DuckBackend(Backend):
    """A user's object with a backend's methods that does not subclass :class:`Backend`: its ``read`` and
    ``exists``, and its ``size``, ``read_range`` and ``describe`` where it has them (else :class:`Backend`'s)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def read(self, name: str) -> Any:
        return self.inner.read(name)

    def exists(self, name: str) -> bool:
        return bool(self.inner.exists(name))

    def size(self, name: str) -> int:
        own = getattr(self.inner, "size", None)
        return int(own(name)) if callable(own) else super().size(name)

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        own = getattr(self.inner, "read_range", None)
        return own(name, offset, length) if callable(own) else super().read_range(name, offset, length)

    def describe(self) -> str:
        own = getattr(self.inner, "describe", None)
        return str(own()) if callable(own) else type(self.inner).__name__


def as_backend(obj: Any) -> Backend | None:
    """``obj`` as a :class:`Backend`: itself if it is one, a wrapper if it has a backend's methods (``read`` and
    ``exists``, optionally ``size``, ``read_range``, ``describe``) without subclassing it, ``None`` otherwise (a
    path or URL)."""
    if isinstance(obj, Backend):
        return obj
    if isinstance(obj, (str, bytes, os.PathLike)):
        return None
    if callable(getattr(obj, "read", None)) and callable(getattr(obj, "exists", None)):
        return _DuckBackend(obj)
    return None


def backend_or_path(uri: Any) -> Backend | str:
    """``uri`` as a :class:`Backend` (see :func:`as_backend`), or else as the path or URL it names
    (``os.fspath``: ``TypeError`` for anything else)."""
    backend = as_backend(uri)
    return backend if backend is not None else os.fspath(uri)


class LocalBackend(Backend):
    """A dataset directory on a local file system."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _file(self, name: str) -> str:
        """The path of ``name`` if it is a regular file (opening a FIFO would wait for a writer forever); an
        ``OSError`` naming it if it is something else. A missing file is left to ``open`` to report."""
        path = self._path(name)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return path
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file (a directory, a FIFO or a device)")
        return path

    def read(self, name: str) -> bytes:
        with open(self._file(name), "rb") as f:
            return f.read()

    def exists(self, name: str) -> bool:
        return os.path.exists(self._path(name))

    def size(self, name: str) -> int:
        return os.path.getsize(self._path(name))

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with open(self._file(name), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def describe(self) -> str:
        return f"local:{self.root}"


class StoreBackend(Backend):
    """A dataset at a store URL (``s3://``, ``gs://``, ``az://``, ``abfs(s)://``, ``http(s)://``, ``file://``),
    read by the Rust stores with retries; credentials from the environment, ``storage_options`` as the CLI's
    ``--store-option``."""

    def __init__(self, url: str, storage_options: dict[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options) if storage_options else None
        self._store: Any = None
        self._pid = -1

    def _s(self) -> Any:
        if self._store is None or self._pid != os.getpid():
            self._store = _core.Store(self.url, self.storage_options)
            self._pid = os.getpid()
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["storage_options"])  # type: ignore[misc]

    def read(self, name: str) -> bytes:
        return self._s().read(name)

    def exists(self, name: str) -> bool:
        return bool(self._s().exists(name))

    def size(self, name: str) -> int:
        return int(self._s().size(name))

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return self._s().read_range(name, int(offset), int(length))

    def describe(self) -> str:
        return self.url


class GCSBackend(Backend):
    """A dataset in a Google Cloud Storage bucket under ``prefix``.

    Without ``client`` it is read by the Rust GCS store (credentials from the environment, e.g.
    ``GOOGLE_APPLICATION_CREDENTIALS``). With a ``google.cloud.storage`` client (or an object with its
    ``bucket(name).blob(name)`` API), reads go through it.
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        self._bucket: Any = None
        self._store: StoreBackend | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_bucket"] = None
        state["_store"] = None
        return state

    def _native(self) -> StoreBackend:
        if self._store is None:
            self._store = StoreBackend(self.describe())
        return self._store

    def _blob(self, name: str) -> Any:
        if self._bucket is None:
            self._bucket = self._client.bucket(self.bucket_name)
        return self._bucket.blob(f"{self.prefix}/{name}" if self.prefix else name)

    def read(self, name: str) -> bytes:
        if self._client is None:
            return self._native().read(name)
        return self._blob(name).download_as_bytes()

    def exists(self, name: str) -> bool:
        if self._client is None:
            return self._native().exists(name)
        return bool(self._blob(name).exists())

    def size(self, name: str) -> int:
        if self._client is None:
            return self._native().size(name)
        blob = self._blob(name)
        blob.reload()
        return int(blob.size)

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if self._client is None:
            return self._native().read_range(name, offset, length)
        # GCS ranges are inclusive at the end.
        return self._blob(name).download_as_bytes(start=offset, end=offset + length - 1)

    def describe(self) -> str:
        return f"gs://{self.bucket_name}/{self.prefix}" if self.prefix else f"gs://{self.bucket_name}"


class _WrappingBackend(Backend):
    """A backend over another (``inner``): ``size`` and ``exists`` pass through; the reads are the wrapper's."""

    inner: Backend

    def size(self, name: str) -> int:
        return self.inner.size(name)

    def exists(self, name: str) -> bool:
        return self.inner.exists(name)


class ThrottledBackend(_WrappingBackend):
    """Wraps a backend and delays each read by ``latency_s`` plus its size over ``bandwidth_bytes_per_s`` (per
    request; concurrent reads overlap), to test and benchmark remote storage locally. ``jitter_s`` adds to each
    request's latency an exponentially distributed delay of that mean (object stores' long tail), drawn from a
    generator seeded by ``seed``; the draws are shared by the threads reading, so their order follows the requests'.

    Reads through it go through Python (its ``bytes``). To measure a dataset as the Rust reader reads object storage,
    give a path or URL with the store options ``simulate_latency_ms``, ``simulate_jitter_ms``, ``simulate_mb_per_s``
    and ``simulate_seed`` (``storage_options=``) instead.
    """

    def __init__(
        self,
        inner: Backend,
        *,
        latency_s: float = 0.0,
        bandwidth_bytes_per_s: float | None = None,
        jitter_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        if latency_s < 0 or jitter_s < 0 or (bandwidth_bytes_per_s is not None and bandwidth_bytes_per_s <= 0):
            raise ValueError("latency_s and jitter_s must be >= 0 and bandwidth_bytes_per_s > 0 (or None)")
        self.inner = inner
        self.latency_s = float(latency_s)
        self.bandwidth = bandwidth_bytes_per_s
        self.jitter_s = float(jitter_s)
        self.seed = seed
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _delay(self, start: float, n: int) -> None:
        jitter = 0.0
        if self.jitter_s > 0:
            with self._lock:
                jitter = self._random.expovariate(1.0 / self.jitter_s)
        delay = self.latency_s + jitter + (n / self.bandwidth if self.bandwidth else 0.0)
        left = delay - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)

    def read(self, name: str) -> Any:
        start = time.perf_counter()
        data = self.inner.read(name)
        self._delay(start, len(memoryview(data).cast("B")))
        return data

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        start = time.perf_counter()
        data = self.inner.read_range(name, offset, length)
        self._delay(start, len(data))
        return data

    def describe(self) -> str:
        bw = f"{self.bandwidth / 1e6:.0f} MB/s" if self.bandwidth else "unlimited"
        jitter = f" + {self.jitter_s * 1e3:.0f} ms mean jitter" if self.jitter_s else ""
        return f"throttled({self.inner.describe()}, latency={self.latency_s * 1e3:.0f} ms{jitter}, {bw})"


class CountingBackend(_WrappingBackend):
    """Wraps a backend and counts its reads (thread-safe): ``n_reads`` whole-object reads, ``n_range_reads``
    ranged reads, ``bytes_read``, and ``log`` of ``(name, offset or None, bytes returned)``. ``size`` and
    ``exists`` pass through uncounted."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Sets every counter to zero and empties the log."""
        with self._lock:
            self.bytes_read = 0
            self.n_reads = 0
            self.n_range_reads = 0
            self.log: list[tuple[str, int | None, int]] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def read(self, name: str) -> Any:
        data = self.inner.read(name)
        n = len(memoryview(data).cast("B"))
        with self._lock:
            self.n_reads += 1
            self.bytes_read += n
            self.log.append((name, None, n))
        return data

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        data = self.inner.read_range(name, offset, length)
        with self._lock:
            self.n_range_reads += 1
            self.bytes_read += len(data)
            self.log.append((name, offset, len(data)))
        return data

    def describe(self) -> str:
        return f"counting({self.inner.describe()})"


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over one object of a backend that reads exactly the ranges asked for (no read
    ahead), e.g. for ``pyarrow.parquet`` over remote objects."""

    def __init__(self, backend: Backend, name: str, size: int | None = None) -> None:
        super().__init__()
        self.backend = backend
        self.name = name
        self._size = backend.size(name) if size is None else int(size)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, base + int(offset))
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        left = max(0, self._size - self._pos)
        n = left if size is None or size < 0 else min(int(size), left)
        if n == 0:
            return b""
        data = self.backend.read_range(self.name, self._pos, n)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)


def open_backend(uri: str | os.PathLike[str] | Backend, *, storage_options: dict[str, str] | None = None) -> Backend:
    """The backend of ``uri``: a :class:`Backend` is returned as is; a local path or ``file://`` URL gives a
    :class:`LocalBackend`, ``gs://bucket/prefix`` a :class:`GCSBackend`, any other store URL a
    :class:`StoreBackend`. An object with a backend's methods that does not subclass :class:`Backend` is used
    through them."""
    found = backend_or_path(uri)
    if isinstance(found, Backend):
        return found
    uri = found
    if uri.startswith("file://"):
        return LocalBackend(uri[len("file://") :])
    if uri.startswith("gs://") and not storage_options:
        bucket, _, prefix = uri[len("gs://") :].partition("/")
        return GCSBackend(bucket, prefix)
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        if scheme not in ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "http", "https"):
            raise ValueError(
                f"unsupported URI scheme in {uri!r} (supported: local paths, file://, s3://, gs://, az://, "
                "abfs(s)://, http(s)://)"
            )
        return StoreBackend(uri, storage_options)
    return LocalBackend(uri)
