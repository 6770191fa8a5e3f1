"""DatasetWriter and DeltaCellsDataset: rows against the source matrix, options, buffers, prefetch, pickling,
processes, threads, and the errors the API names."""

import json
import multiprocessing
import os
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
from conftest import make_counts, same
from deltacells import DatasetWriter, FormatError, Manifest, open_dataset

N_CELLS, N_GENES, TILE = 350, 90, 100


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ds") / "ds")
    full = make_counts(N_CELLS, N_GENES, density=0.15, seed=11)
    order = np.random.default_rng(1).permutation(N_GENES)
    with DatasetWriter(
        root, n_genes=N_GENES, tile_size=TILE, gene_order=order, var_names=[f"g{j}" for j in range(N_GENES)],
        n_chunks=3, level=3, threads=2, metadata={"a": 1},
    ) as w:
        for lo in range(0, N_CELLS, TILE):
            assert w.add_tile(full[lo : lo + TILE]) == lo // TILE
    return root, full, order, full[:, order].tocsr()


def test_manifest_and_files(built):
    root, full, order, _ = built
    ds = open_dataset(root)
    assert (ds.n_cells, ds.n_genes, ds.n_tiles, ds.tile_size, len(ds)) == (N_CELLS, N_GENES, 4, TILE, N_CELLS)
    m = ds.manifest
    assert m.tile_cells == [100, 100, 100, 50] and list(ds.limits) == [100, 200, 300, 350]
    assert m.metadata == {"a": 1} and m.n_chunks == 3 and m.zstd_level == 3 and m.version == 2
    assert ds.tile_bounds(3) == (300, 350) and list(ds.tile_of([0, 99, 100, 349])) == [0, 0, 1, 3]
    assert list(ds.gene_order) == list(order) and ds.gene_order.dtype == np.int32
    assert ds.var_names == [f"g{j}" for j in order]
    for t in range(4):
        assert os.path.getsize(os.path.join(root, Manifest.tile_name(t))) == m.tile_bytes[t]
    assert json.loads(open(os.path.join(root, "manifest.json")).read())["version"] == 2
    # A file:// URL is the same dataset as its path.
    by_url = open_dataset(f"file://{root}")
    assert by_url.manifest.tile_bytes == m.tile_bytes
    np.testing.assert_array_equal(by_url.get_batch([349, 0, 120]).to_scipy().toarray(),
                                  ds.get_batch([349, 0, 120]).to_scipy().toarray())


def test_rows_match_the_source(built):
    root, _, _, expected = built
    ds = open_dataset(root)
    assert same(ds.get_batch(np.arange(N_CELLS)).to_scipy(), expected) and same(ds[:].to_scipy(), expected)
    rng = np.random.default_rng(2)
    for _ in range(25):
        idx = rng.integers(0, N_CELLS, int(rng.integers(1, 200)))
        for dt in (np.float32, np.int32):
            b = ds.get_batch(idx, values_dtype=dt)
            assert b.values.dtype == dt and b.indptr.dtype == np.int64 and same(b.to_scipy(), expected[idx])
    ds1 = open_dataset(root, max_cached_tiles=1, max_prefetch_tiles=1)
    idx = np.arange(N_CELLS)[::-1]
    assert same(ds1.get_batch(idx).to_scipy(), expected[idx])
    assert same(ds1.get_batch(range(95, 305)).to_scipy(), expected[95:305])
    assert same(ds1.get_batch(iter([3, 1, 2])).to_scipy(), expected[[3, 1, 2]])


def test_getitem_variants(built):
    root, _, _, expected = built
    ds = open_dataset(root)
    assert same(ds[5].to_scipy(), expected[[5]]) and same(ds[-1].to_scipy(), expected[[N_CELLS - 1]])
    assert same(ds[10:300:7].to_scipy(), expected[10:300:7])
    assert same(ds[[4, 2, 4]].to_scipy(), expected[[4, 2, 4]])
    assert same(ds[np.array([0, 349])].to_scipy(), expected[[0, 349]])


def test_keys_wrap_and_the_dataset_s_arrays_stay_its_own(built):
    root, _, order, expected = built
    ds = open_dataset(root)
    # A 0-d integer array (or tensor) is a key as an int is: negative ones count from the end.
    for key in (np.array(-1), np.array(-2, np.int32), np.int64(-1)):
        assert same(ds[key].to_scipy(), expected[[N_CELLS + int(key)]])
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in the test environment
        torch = None
    if torch is not None:
        assert same(ds[torch.tensor(-1)].to_scipy(), expected[[N_CELLS - 1]])
        with pytest.raises(TypeError):
            ds[torch.tensor(-1.0)]
    # What the dataset hands out does not change it.
    with pytest.raises(ValueError):
        ds.limits[0] = 5
    with pytest.raises(ValueError):
        ds.gene_order[0] = 5
    names = ds.var_names
    stored = list(names)
    names.clear()
    assert ds.var_names == stored == [f"g{j}" for j in order] and list(ds.gene_order) == list(order)
    again = pickle.loads(pickle.dumps(ds))
    assert list(again.limits) == [100, 200, 300, 350] and not again.limits.flags.writeable
    # Thread counts past any use are refused by name, rather than exhausting the machine's threads.
    for option in ("io_threads", "decode_threads"):
        with pytest.raises(ValueError, match=f"{option} = 100000: at most 1024 threads"):
            open_dataset(root, **{option: 100_000})
        with pytest.raises(ValueError, match=f"{option} = 100000"):
            ds.reopened(**{option: 100_000})
    # Counts past what any size holds, or below 1, are named too (not the conversion's message).
    with pytest.raises(ValueError, match="max_cached_tiles = 18446744073709551616: must be at most"):
        open_dataset(root, max_cached_tiles=2**64)
    with pytest.raises(ValueError, match="io_threads = 0: must be at least 1"):
        ds.reopened(io_threads=0)
    with pytest.raises(TypeError, match="max_prefetch_tiles must be an integer, not 'four'"):
        open_dataset(root, max_prefetch_tiles="four")


def test_empty_and_invalid_indices(built):
    ds = open_dataset(built[0])
    b = ds.get_batch([])
    assert b.n_rows == 0 and list(b.indptr) == [0] and b.shape == (0, N_GENES)
    # One check, the reader's, gives one message naming the cell and its place in the request, whichever way
    # the cells come in (get_batch, batch_nnz, indexing, obs.take).
    for bad, cell, position in (([-1], -1, 0), ([0, N_CELLS], N_CELLS, 1), ([10**6], 10**6, 0),
                                (np.array([3, 2**64 - 1], np.uint64), 2**64 - 1, 1), ([5, 10**20], 10**20, 1)):
        want = rf"cell {cell} \(position {position} of the request\) is out of range: there are {N_CELLS} cells"
        with pytest.raises(IndexError, match=want):
            ds.get_batch(bad)
        if cell < 2**63:
            with pytest.raises(IndexError, match=want):
                ds.batch_nnz(bad)
    for key, cell in ((N_CELLS, N_CELLS), (-N_CELLS - 2, -N_CELLS - 2)):
        with pytest.raises(IndexError, match=rf"cell {cell} \(position 0 of the request\) is out of range"):
            ds[key]
    with pytest.raises(IndexError):
        ds.prefetch([99])
    with pytest.raises(IndexError):
        ds.get_tile(99)
    with pytest.raises(ValueError):
        ds.get_batch([0], values_dtype=np.float64)


def test_out_buffers_share_memory(built):
    root, _, _, expected = built
    ds = open_dataset(root)
    idx = [3, 150, 3, 349]
    nnz = ds.batch_nnz(idx)
    oi, ov = np.full(nnz + 4, -1, np.int32), np.full(nnz + 4, -1, np.float32)
    b = ds.get_batch(idx, out_indices=oi, out_values=ov)
    assert np.shares_memory(b.indices, oi) and np.shares_memory(b.values, ov) and (oi[nnz:] == -1).all()
    assert same(b.to_scipy(), expected[idx])
    iv = np.empty(nnz, np.int32)
    assert np.shares_memory(ds.get_batch(idx, values_dtype=np.int32, out_values=iv).values, iv)
    with pytest.raises(ValueError):
        ds.get_batch(idx, out_indices=np.empty(nnz - 1, np.int32), out_values=ov)
    with pytest.raises(ValueError):
        ds.get_batch(idx, out_indices=oi, out_values=np.empty(nnz, np.float64))
    # Buffers the batch cannot be written into: read-only, strided, 2-D; each refused, naming the buffer.
    readonly = np.empty(nnz, np.int32)
    readonly.flags.writeable = False
    strided = np.empty(2 * nnz, np.float32)[::2]
    for bad_i, bad_v, name in ((readonly, ov, "out_indices"), (oi, strided, "out_values"),
                               (np.empty((1, nnz), np.int32), ov, "out_indices")):
        with pytest.raises(ValueError, match=name):
            ds.get_batch(idx, out_indices=bad_i, out_values=bad_v)


def test_batch_nnz_fetches_without_decoding(built):
    root, _, _, expected = built
    ds = open_dataset(root)
    assert ds.batch_nnz([5, 150]) == expected[[5, 150]].nnz and ds.batch_nnz([]) == 0
    s = ds.stats
    assert s["tiles_decoded"] == 0 and s["tiles_fetched"] == 2


def test_prefetch_counts_and_stats(built):
    ds = open_dataset(built[0], max_cached_tiles=4, max_prefetch_tiles=4)
    assert ds.prefetch([0, 1, 2, 3]) == 4 and ds.prefetch([0, 1]) == 0 and ds.prefetch([]) == 0
    ds.get_batch([0, 150, 250, 349])
    s = ds.stats
    assert s["tiles_fetched"] == 4 and set(s) >= {
        "tiles_fetched", "fetch_seconds", "stall_seconds", "tiles_decoded", "decode_seconds", "tile_cache_hits",
        "decoded_cache_hits",
    }
    assert ds.prefetch_cells([]) == 0
    with pytest.raises(IndexError, match=rf"cell {N_CELLS} \(position 1 of the request\) is out of range"):
        ds.prefetch_cells([0, N_CELLS])
    with pytest.raises(IndexError, match=r"cell -1 \(position 0"):
        ds.prefetch_cells([-1])


def test_get_tile_is_the_stored_tile(built):
    root, full, order, expected = built
    ds = open_dataset(root)
    t = ds.get_tile(1)
    assert t.n_cells == 100 and same(t.to_scipy(), expected[100:200])


def test_pickle_roundtrip_reopens_lazily(built):
    root, _, _, expected = built
    ds = open_dataset(root, max_cached_tiles=1, decode_threads=2, cache_dir="/tmp/x")
    ds.get_batch([1, 2])
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.max_cached_tiles == 1 and clone.decode_threads == 2 and clone.cache_dir == "/tmp/x"
    assert clone._reader is None, "reopened only when used"
    assert same(clone.get_batch([7, 300]).to_scipy(), expected[[7, 300]]) and clone.stats["tiles_fetched"] == 2


def _rows_in_child(ds, idx):
    return ds.get_batch(idx).to_scipy()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing(built, method):
    root, _, _, expected = built
    ds = open_dataset(root)
    ds.get_batch([0, 200])  # the parent's reader has threads and cached tiles before the fork
    ctx = multiprocessing.get_context(method)
    idx = [[1, 2, 3], [349, 0], list(range(90, 110))]
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        got = list(pool.map(_rows_in_child, [ds] * 3, idx))
    assert all(same(g, expected[i]) for g, i in zip(got, idx))
    assert same(ds.get_batch([5]).to_scipy(), expected[[5]]), "the parent's reader still works"


def _child_uses_inherited(q):
    ds = _INHERITED[0]
    q.put(ds.get_batch([10, 20, 330]).to_scipy().toarray())


_INHERITED: list = []


def test_fork_child_reopens_an_inherited_dataset(built):
    root, _, _, expected = built
    ds = open_dataset(root, decode_threads=2)
    ds.prefetch([0, 1, 2, 3])
    ds.get_batch([0, 150])
    _INHERITED[:] = [ds]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_uses_inherited, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and np.array_equal(got, expected[[10, 20, 330]].toarray())


def test_concurrent_get_batch_from_threads(built):
    root, _, _, expected = built
    ds = open_dataset(root, max_cached_tiles=2)
    rng = np.random.default_rng(3)
    requests = [rng.integers(0, N_CELLS, 60) for _ in range(8 * 30)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: ds.get_batch(i).to_scipy(), requests))
    assert all(same(g, expected[i]) for g, i in zip(got, requests))


def test_context_manager_and_close(built):
    root, _, _, expected = built
    with open_dataset(root) as ds:
        ds.get_batch([1])
    ds.close()
    ds.close()
    assert ds._reader is None and same(ds.get_batch([2]).to_scipy(), expected[[2]])


def test_corrupt_tile_detected_with_verify(built, tmp_path):
    import shutil

    root = str(tmp_path / "bad")
    shutil.copytree(built[0], root)
    path = os.path.join(root, Manifest.tile_name(1))
    data = bytearray(open(path, "rb").read())
    data[-20] ^= 0xFF
    open(path, "wb").write(bytes(data))
    ds = open_dataset(root, verify=True)
    ds.get_batch([0])
    for _ in range(2):
        with pytest.raises(FormatError, match="CRC") as e:
            ds.get_batch([150])
        assert "tile 1" in str(e.value) and "tile_000001.dct" in str(e.value)
    with pytest.raises(FormatError, match="CRC"):
        open_dataset(root, verify=True).get_batch([101])


def test_tile_not_matching_manifest(built, tmp_path):
    import shutil

    from deltacells import write_tile

    root = str(tmp_path / "swap")
    shutil.copytree(built[0], root)
    write_tile(os.path.join(root, Manifest.tile_name(2)), make_counts(50, N_GENES, seed=1))
    with pytest.raises(FormatError, match="tile 2") as e:
        open_dataset(root).get_batch([250])
    assert "tile_bytes" in str(e.value) or "manifest" in str(e.value)


def test_missing_manifest_and_invalid_options(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest"):
        open_dataset(str(tmp_path))
    # A manifest with a bad key: the error names the key, through open_dataset as through Manifest.from_json.
    root = tmp_path / "bad"
    with DatasetWriter(str(root), n_genes=5, tile_size=10, level=3) as w:
        w.add_tile(make_counts(10, 5, seed=1))
    manifest = json.loads((root / "manifest.json").read_text())
    for key, value in (("n_genes", "many"), ("tile_size", 0), ("tile_nnz", [1, 2])):
        broken = dict(manifest, **{key: value})
        (root / "manifest.json").write_text(json.dumps(broken))
        with pytest.raises(FormatError, match=key):
            open_dataset(str(root))
    for k in ("max_cached_tiles", "max_prefetch_tiles", "io_threads", "decode_threads"):
        with pytest.raises(ValueError):
            open_dataset(str(tmp_path), **{k: 0})


def test_writer_refuses_nonempty_dir_without_overwrite(tmp_path):
    root = tmp_path / "w"
    root.mkdir()
    (root / "x.txt").write_text("x")
    with pytest.raises(FileExistsError):
        DatasetWriter(str(root), n_genes=5, tile_size=10)
    with DatasetWriter(str(root), n_genes=5, tile_size=10, overwrite=True, level=3) as w:
        w.add_tile(make_counts(10, 5, seed=1))
    assert open_dataset(str(root)).n_cells == 10


def test_overwrite_replaces_the_dataset_and_leaves_other_files(tmp_path):
    """A larger dataset with obs and a gene table, rewritten smaller without them: none of its tiles, obs files or
    side files stay behind to be mistaken for the new dataset's, the file that is not the dataset's stays."""
    import pandas as pd
    from deltacells.obs import ObsSchema

    root = tmp_path / "w"
    obs = pd.DataFrame({"kind": pd.Categorical(["a", "b"] * 15)})
    with DatasetWriter(str(root), n_genes=5, tile_size=10, level=3, var_names=[f"g{i}" for i in range(5)],
                       gene_order=[4, 3, 2, 1, 0], obs_schema=ObsSchema.infer([obs])) as w:
        for lo in range(0, 30, 10):
            w.add_tile(make_counts(10, 5, seed=lo), obs=obs.iloc[lo : lo + 10])
    (root / "NOTES.txt").write_text("mine")
    before = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert {"tiles/tile_000002.dct", "gene_order.npy", "var_names.txt", "obs/schema.json"} <= before
    small = make_counts(10, 5, seed=9)
    with DatasetWriter(str(root), n_genes=5, tile_size=10, overwrite=True, level=3) as w:
        w.add_tile(small)
    after = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert after == {"manifest.json", "tiles/tile_000000.dct", "NOTES.txt"}, after
    ds = open_dataset(str(root))
    assert ds.n_cells == 10 and ds.obs is None and ds.var_names is None
    assert np.array_equal(ds.get_batch(range(10)).to_dense(), small.toarray())


def test_writer_tile_rules(tmp_path):
    w = DatasetWriter(str(tmp_path / "r"), n_genes=6, tile_size=10, level=3)
    with pytest.raises(ValueError, match="genes"):
        w.add_tile(make_counts(10, 7))
    with pytest.raises(ValueError, match="between 1 and"):
        w.add_tile(make_counts(11, 6))
    with pytest.raises(ValueError, match="between 1 and"):
        w.add_tile(make_counts(0, 6))
    bad = make_counts(10, 6, density=0.5).tolil()
    bad[3, 2] = 1.5
    with pytest.raises(ValueError, match="integer"):
        w.add_tile(bad.tocsr())
    assert w.add_tile(make_counts(10, 6, seed=2)) == 0, "a refused tile leaves the writer usable"
    assert w.add_tile(make_counts(4, 6, seed=3)) == 1
    with pytest.raises(ValueError, match="last tile"):
        w.add_tile(make_counts(10, 6))
    m = w.close()
    assert m.tile_cells == [10, 4]
    with pytest.raises(RuntimeError):
        w.add_tile(make_counts(1, 6))
    with pytest.raises(RuntimeError):
        w.close()


def test_writer_without_tiles_or_after_exception_leaves_no_manifest(tmp_path):
    w = DatasetWriter(str(tmp_path / "e"), n_genes=3, tile_size=5)
    with pytest.raises(ValueError, match="no tiles"):
        w.close()
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(str(tmp_path / "x"), n_genes=3, tile_size=5, level=3) as w2:
            w2.add_tile(make_counts(5, 3))
            raise RuntimeError("boom")
    assert not os.path.exists(tmp_path / "x" / "manifest.json")
    with pytest.raises(FileNotFoundError):
        open_dataset(str(tmp_path / "x"))


def test_writer_argument_validation(tmp_path):
    with pytest.raises(ValueError):
        DatasetWriter(str(tmp_path / "a"), n_genes=5, tile_size=0)
    with pytest.raises(ValueError, match="permutation"):
        DatasetWriter(str(tmp_path / "b"), n_genes=5, tile_size=5, gene_order=[0, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="var_names"):
        DatasetWriter(str(tmp_path / "c"), n_genes=5, tile_size=5, var_names=["a"])


def test_gene_order_assigned_late_and_callers_matrix_untouched(tmp_path):
    full = make_counts(20, 8, density=0.4, seed=9)
    before = (full.data.copy(), full.indices.copy(), full.indptr.copy())
    order = np.random.default_rng(4).permutation(8)
    w = DatasetWriter(str(tmp_path / "g"), n_genes=8, tile_size=20, level=3)
    w.gene_order = order
    w.add_tile(full)
    w.close()
    ds = open_dataset(str(tmp_path / "g"))
    assert list(ds.gene_order) == list(order) and same(ds[:].to_scipy(), full[:, order])
    assert all(np.array_equal(a, b) for a, b in zip(before, (full.data, full.indices, full.indptr)))
    plain = DatasetWriter(str(tmp_path / "p"), n_genes=8, tile_size=20, level=3)
    plain.add_tile(full)
    plain.close()
    ds = open_dataset(str(tmp_path / "p"))
    assert ds.gene_order is None and ds.var_names is None and ds.var is None and ds.obs is None


def test_gil_is_released_while_reading(built):
    """Reads through a Python backend call back into Python from the reader's I/O threads: a get_batch that kept
    the GIL would wait for them forever."""
    from deltacells import CountingBackend, LocalBackend

    root, _, _, expected = built
    counting = CountingBackend(LocalBackend(root))
    ds = open_dataset(counting)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("b", ds.get_batch(np.arange(N_CELLS))))
    t.start()
    t.join(60)
    assert not t.is_alive(), "get_batch through a Python backend did not finish"
    assert same(result["b"].to_scipy(), expected) and counting.n_reads == 1 + 4


def test_a_reopened_dataset_sends_no_request_and_has_its_own_settings(built):
    from deltacells import CountingBackend, LocalBackend

    root, _, _, expected = built
    counting = CountingBackend(LocalBackend(root))
    ds = open_dataset(counting, max_cached_tiles=1)
    other = ds.reopened(max_cached_tiles=3, max_prefetch_tiles=2)
    assert counting.n_reads == 1, "reopening reads nothing"
    assert (other.max_cached_tiles, other.max_prefetch_tiles, other.io_threads) == (3, 2, ds.io_threads)
    assert other.manifest == ds.manifest and ds.max_cached_tiles == 1
    assert same(other.get_batch(np.arange(N_CELLS)).to_scipy(), expected)
    assert other.stats["tiles_fetched"] == 4 and ds.stats["tiles_fetched"] == 0
    with pytest.raises(ValueError, match="at least 1"):
        ds.reopened(io_threads=0)


def test_arrays_own_the_rust_buffers(built):
    """Batches and decoded tiles are numpy arrays over the Rust vectors (no copy): numpy does not own their memory,
    a Rust container object does, and it lives as long as the array."""
    root, _, _, expected = built
    ds = open_dataset(root)
    b = ds.get_batch([5, 200, 7])
    for arr in (b.indptr, b.indices, b.values):
        assert not arr.flags.owndata and arr.base is not None and type(arr.base).__name__ == "PySliceContainer"
    d = ds.get_tile(0).decode()
    assert not d.indices.flags.owndata and type(d.values.base).__name__ == "PySliceContainer"
    del ds
    assert same(b.to_scipy(), expected[[5, 200, 7]]), "the batch outlives its dataset"


def test_store_options_simulate_a_distant_store(built):
    """``simulate_*`` store options read a local dataset as a distant object store would be read (the Rust reader's
    requests delayed, not memory-mapped), through the dataset and the training loader, with the same rows."""
    torch = pytest.importorskip("torch")
    from deltacells.torch import make_loader

    root, _, _, expected = built
    far = {"simulate_latency_ms": "3", "simulate_jitter_ms": "1", "simulate_mb_per_s": "50", "simulate_seed": "7"}
    ds = open_dataset(root, storage_options=far)
    idx = np.random.default_rng(5).permutation(N_CELLS)[:120]
    assert same(ds.get_batch(idx).to_scipy(), expected[idx])
    assert ds.stats["tiles_fetched"] == 4
    # In the training process and in DataLoader workers (which open their own readers with the options), whole
    # tiles and tiles in ranged parts of 500 bytes.
    for workers, options in ((0, far), (2, far), (2, {**far, "part_bytes": "500"})):
        seen = []
        for b in make_loader(root, 64, seed=2, storage_options=options, num_workers=workers):
            seen.append(b["index"].numpy())
            np.testing.assert_array_equal(b["X"].to_dense().numpy(), expected[b["index"].numpy()].toarray())
            assert b["X"].dtype == torch.float32
        assert sorted(np.concatenate(seen).tolist()) == list(range(N_CELLS)), (workers, options)
    # Tiles in ranged parts of 500 bytes (many a tile, read concurrently): the same rows, each tile fetched once.
    in_parts = open_dataset(root, storage_options={**far, "part_bytes": "500"})
    assert min(in_parts.manifest.tile_bytes) > 3 * 500
    assert same(in_parts.get_batch(idx).to_scipy(), expected[idx])
    assert in_parts.stats["tiles_fetched"] == 4
    for key, value in (("simulate_latency_ms", "-1"), ("simulate_mb_per_s", "fast"), ("simulate_seed", "-3"),
                       ("part_bytes", "8MiB")):
        with pytest.raises(Exception, match=key) as caught:
            open_dataset(root, storage_options={key: value})
        assert value in str(caught.value)
