"""Backends: the package's own (local, store URL, GCS with a client) and Python objects handed to the reader,
counted so that "one read per tile" and "obs localization uses ranged reads only" are asserted."""

import os
import pickle
import time

import numpy as np
import pytest
from conftest import make_counts, require, same
from deltacells import (
    Backend,
    CountingBackend,
    DatasetWriter,
    DeltaCellsDataset,
    GCSBackend,
    LocalBackend,
    RangeFile,
    StoreBackend,
    ThrottledBackend,
    open_backend,
    open_corpus,
    open_dataset,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("b") / "ds")
    full = make_counts(250, 40, density=0.2, seed=31)
    with DatasetWriter(root, n_genes=40, tile_size=50, level=3, n_chunks=2) as w:
        for lo in range(0, 250, 50):
            w.add_tile(full[lo : lo + 50])
    return root, full


def test_local_backend(tmp_path):
    (tmp_path / "x").write_bytes(bytes(range(256)) * 4)
    b = LocalBackend(str(tmp_path))
    assert bytes(b.read("x"))[:3] == b"\x00\x01\x02" and b.exists("x") and not b.exists("y")
    assert b.read_range("x", 10, 5) == bytes(range(10, 15)) and b.size("x") == 1024
    assert b.read_range("x", 1020, 100) == bytes(range(252, 256)) and b.read_range("x", 5000, 10) == b""
    with pytest.raises(FileNotFoundError):
        b.read("y")
    assert pickle.loads(pickle.dumps(b)).root == b.root and b.describe() == f"local:{b.root}"
    assert LocalBackend.__mro__[1] is Backend

    class Plain(LocalBackend):  # no native ranged read: the defaults read the whole object
        read_range = Backend.read_range
        size = Backend.size

    assert (
        Plain(str(tmp_path)).read_range("x", 10, 5) == bytes(range(10, 15)) and Plain(str(tmp_path)).size("x") == 1024
    )


def test_open_backend_dispatch(tmp_path):
    assert isinstance(open_backend(str(tmp_path)), LocalBackend)
    assert isinstance(open_backend(f"file://{tmp_path}"), LocalBackend)
    g = open_backend("gs://my-bucket/some/prefix/")
    assert isinstance(g, GCSBackend) and g.describe() == "gs://my-bucket/some/prefix"
    assert open_backend(g) is g
    assert isinstance(open_backend("s3://bucket/x"), StoreBackend)
    with pytest.raises(ValueError, match="scheme"):
        open_backend("ftp://host/x")


def test_store_backend_reads_through_the_rust_store(dataset):
    root, _ = dataset
    b = StoreBackend(f"file://{root}")
    m = bytes(b.read("manifest.json"))
    assert b"deltacells-dataset" in m and b.size("manifest.json") == len(m) and b.exists("manifest.json")
    assert b.read_range("manifest.json", 2, 5) == m[2:7] and b.read_range("manifest.json", len(m) + 5, 3) == b""
    assert not b.exists("nope") and pickle.loads(pickle.dumps(b)).url == b.url
    with pytest.raises(FileNotFoundError):
        b.read("nope")


def test_gcs_backend_with_a_client_uses_its_api():
    calls = []

    class Blob:
        size = 1234

        def __init__(self, name):
            self.name = name

        def download_as_bytes(self, start=None, end=None):
            calls.append((self.name, start, end))
            return b"z" * (1234 if start is None else end - start + 1)

        def exists(self):
            return self.name.endswith("t")

        def reload(self):
            calls.append((self.name, "reload"))

    class Client:
        def bucket(self, name):
            assert name == "bkt"
            return self

        def blob(self, name):
            return Blob(name)

    b = GCSBackend("bkt", "p", client=Client())
    assert b.read_range("tiles/t", 100, 50) == b"z" * 50 and calls[-1] == ("p/tiles/t", 100, 149)
    n = len(calls)
    assert b.read_range("tiles/t", 0, 0) == b"" and len(calls) == n
    assert b.size("tiles/t") == 1234 and calls[-1] == ("p/tiles/t", "reload")
    assert b.exists("tiles/t") and len(b.read("tiles/t")) == 1234
    state = b.__getstate__()
    assert state["_client"] is None and state["_bucket"] is None


def test_throttled_backend_delays_reads(tmp_path):
    (tmp_path / "x").write_bytes(b"0" * 1_000_000)
    b = ThrottledBackend(LocalBackend(str(tmp_path)), latency_s=0.1, bandwidth_bytes_per_s=5e6)
    t0 = time.perf_counter()
    assert len(b.read("x")) == 1_000_000
    assert 0.28 <= time.perf_counter() - t0
    t0 = time.perf_counter()
    assert len(b.read_range("x", 0, 10)) == 10 and time.perf_counter() - t0 >= 0.09
    assert b.exists("x") and b.size("x") == 1_000_000 and "throttled" in b.describe()


def test_throttled_backend_jitter_is_seeded_and_survives_pickling(tmp_path):
    import pickle
    import random

    (tmp_path / "x").write_bytes(b"0" * 100)
    b = ThrottledBackend(LocalBackend(str(tmp_path)), jitter_s=0.01, seed=5)
    b = pickle.loads(pickle.dumps(b))
    expected = random.Random(5)
    for _ in range(8):
        draw = expected.expovariate(100.0)
        t0 = time.perf_counter()
        assert b.read_range("x", 0, 10) == b"0" * 10
        assert time.perf_counter() - t0 >= draw * 0.999
    assert "jitter" in b.describe()
    with pytest.raises(ValueError):
        ThrottledBackend(LocalBackend(str(tmp_path)), jitter_s=-1)


def test_counting_backend_and_range_file(tmp_path):
    (tmp_path / "x").write_bytes(bytes(range(200)))
    counting = CountingBackend(LocalBackend(str(tmp_path)))
    counting.read_range("x", 0, 100)
    counting.read("x")
    assert counting.bytes_read == 300 and counting.n_range_reads == 1 and counting.n_reads == 1
    assert counting.log[0] == ("x", 0, 100) and counting.log[1] == ("x", None, 200)
    counting.reset()
    assert counting.bytes_read == 0 and counting.log == []
    f = RangeFile(counting, "x")
    assert f.readable() and f.seekable() and f.tell() == 0
    assert f.read(5) == bytes(range(5)) and f.tell() == 5
    f.seek(-10, os.SEEK_END)
    assert f.tell() == 190 and f.read() == bytes(range(190, 200)) and f.read(5) == b""
    f.seek(20)
    buf = bytearray(4)
    assert f.readinto(buf) == 4 and bytes(buf) == bytes(range(20, 24))
    f.seek(3, os.SEEK_CUR)
    assert f.tell() == 27 and f.seek(-100) == 0
    assert counting.n_reads == 0 and counting.bytes_read == 5 + 10 + 4
    assert pickle.loads(pickle.dumps(counting)).n_reads == 0


def test_one_read_per_tile_through_a_python_backend(dataset):
    root, full = dataset
    counting = CountingBackend(LocalBackend(root))
    ds = open_dataset(counting, max_cached_tiles=5)
    assert counting.n_reads == 1 and counting.log[0][0] == "manifest.json"
    counting.reset()
    order = np.random.default_rng(1).permutation(250)
    for chunk in np.array_split(order, 10):
        assert same(ds.get_batch(chunk).to_scipy(), full[chunk])
    tiles = sorted(name for name, _, _ in counting.log)
    assert tiles == sorted(f"tiles/tile_{t:06d}.dct" for t in range(5)), "one whole read per tile"
    assert counting.n_range_reads == 0


def test_native_backends_skip_python(dataset):
    root, full = dataset
    for backend in (LocalBackend(root), StoreBackend(f"file://{root}")):
        ds = open_dataset(backend)
        assert same(ds[:].to_scipy(), full) and ds.backend is backend


def test_errors_raised_by_a_backend_name_it(dataset):
    root, _ = dataset

    class Broken(LocalBackend):
        def read(self, name):
            if name.startswith("tiles/"):
                raise OSError("the network is down")
            return super().read(name)

    ds = open_dataset(Broken(root))
    with pytest.raises(OSError, match="network is down") as e:
        ds.get_batch([0])
    assert "tile_000000.dct" in str(e.value)

    class Missing(LocalBackend):
        def read(self, name):
            if name.endswith("tile_000002.dct"):
                raise FileNotFoundError(name)
            return super().read(name)

    with pytest.raises(FileNotFoundError, match="tile 2"):
        open_dataset(Missing(root)).get_batch([120])

    class Counted(LocalBackend):
        """Raises ``error`` for tile 1 and counts the calls: a final failure is asked once, a transient one again."""

        def __init__(self, root, error):
            super().__init__(root)
            self.error, self.calls = error, 0

        def read(self, name):
            if name.endswith("tile_000001.dct"):
                self.calls += 1
                if isinstance(self.error, BaseException):
                    raise self.error
                return self.error  # an answer of the wrong type
            return super().read(name)

    # A mapping's KeyError is a missing object, as FileNotFoundError is.
    with pytest.raises(FileNotFoundError, match="tile 1"):
        open_dataset(Counted(root, KeyError("tiles/tile_000001.dct"))).get_batch([60])
    # A permission refused, a programming error or an answer of the wrong type: final, asked once, named.
    for error, said in ((PermissionError("access denied"), "access denied"), (TypeError("a bug"), "a bug"),
                        ("not bytes", "must be bytes, bytearray, memoryview, mmap or a 1-D uint8 numpy array, "
                                      "not str")):
        backend = Counted(root, error)
        with pytest.raises(OSError, match=said) as e:
            open_dataset(backend).get_batch([60])
        assert "tile_000001.dct" in str(e.value) and "check the network" not in str(e.value), e.value
        assert backend.calls == 1, (error, backend.calls)
    # A failure of the network is retried.
    flaky = Counted(root, ConnectionResetError("reset by peer"))
    with pytest.raises(OSError, match="reset by peer"):
        open_dataset(flaky).get_batch([60])
    assert flaky.calls > 1


def test_throttled_remote_reads_correctly(dataset):
    root, full = dataset
    remote = ThrottledBackend(LocalBackend(root), latency_s=0.02, bandwidth_bytes_per_s=50e6)
    ds = open_dataset(remote, io_threads=4)
    assert ds.prefetch(range(5)) == 5
    assert same(ds[:].to_scipy(), full)


def test_exiting_with_backend_reads_in_flight_does_not_abort(dataset):
    """Prefetches through a Python backend still running when the interpreter exits are waited for: Python would
    otherwise end their threads in a way that aborts the process (exit status 134)."""
    import subprocess
    import sys
    import textwrap

    root, _ = dataset
    script = textwrap.dedent(f"""
        import time
        from deltacells import LocalBackend, ThrottledBackend, open_dataset
        ds = open_dataset(ThrottledBackend(LocalBackend({root!r}), latency_s=0.2), io_threads=4)
        class SlowTeardown:  # keeps the interpreter finalizing while the backend's reads wake up
            def __del__(self):
                time.sleep(0.6)
        keep = SlowTeardown()
        ds.prefetch(list(range(ds.n_tiles)))
        time.sleep(0.05)  # the reads have started and are sleeping in the backend
        print("exiting", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "exiting", (done.returncode, done.stderr[-2000:])


class DuckStore:
    """A user's store with a backend's methods that does not subclass Backend (only read and exists are required),
    counting its reads."""

    def __init__(self, root):
        self.root, self.reads = root, []

    def read(self, name):
        self.reads.append(name)
        with open(os.path.join(self.root, name), "rb") as f:
            return f.read()

    def exists(self, name):
        return os.path.exists(os.path.join(self.root, name))


@pytest.mark.parametrize("described", [False, True])
def test_an_object_with_a_backend_s_methods_is_a_backend(tmp_path, described):
    root = str(tmp_path / "named")
    full = make_counts(250, 40, density=0.2, seed=32)
    with DatasetWriter(root, n_genes=40, tile_size=50, level=3, var_names=[f"g{j}" for j in range(40)]) as w:
        for lo in range(0, 250, 50):
            w.add_tile(full[lo : lo + 50])
    duck = DuckStore(root)
    if described:
        duck.describe = lambda: "duck:store"
    backend = open_backend(duck)
    assert isinstance(backend, Backend) and backend.inner is duck
    assert backend.describe() == ("duck:store" if described else "DuckStore")
    assert backend.size("manifest.json") == os.path.getsize(os.path.join(root, "manifest.json"))
    assert backend.read_range("manifest.json", 1, 3) == open(os.path.join(root, "manifest.json"), "rb").read()[1:4]
    for opened in (open_dataset(duck), DeltaCellsDataset(duck)):
        assert same(opened.get_batch([3, 249, 100]).to_scipy(), full[[3, 249, 100]])
    assert any(r.startswith("tiles/") for r in duck.reads), "the tiles were read through the object"
    corpus = open_corpus([duck])
    assert corpus.members == [backend.describe()]
    assert same(corpus.get_batch([7, 8]).to_scipy(), full[[7, 8]])
    torch = require("torch")
    from deltacells.torch import make_loader

    rows = [b["index"] for b in make_loader(duck, batch_size=64, shuffle=False)]
    assert torch.cat(rows).tolist() == list(range(250)), "the loader reads every cell through the object"
    assert type(open_backend(root)) is LocalBackend, "a path is not an object with a backend's methods"
    with pytest.raises(TypeError):
        open_dataset(object())
