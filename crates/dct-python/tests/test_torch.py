"""deltacells.torch and the torch conversions: the epoch order, splits over ranks and workers, resumption in a
fresh process, a real 2-process DistributedDataParallel run, prefetching ahead on a throttled store, and
DataLoader workers over a pickled dataset."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import make_counts, require, same

torch = require("torch")
pd = require("pandas")

from deltacells import DatasetWriter, LocalBackend, SparseBatch, ThrottledBackend, open_dataset  # noqa: E402
from deltacells.obs import ObsSchema  # noqa: E402
from deltacells.torch import DeltaCellsIterableDataset, make_loader  # noqa: E402

N, G, TILE = 470, 60, 50  # 10 tiles, the last of 20


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("torch") / "ds")
    full = make_counts(N, G, density=0.2, seed=60)
    rng = np.random.default_rng(0)
    obs = pd.DataFrame({"cell_type": pd.Categorical(rng.choice(["a", "b", "c"], N)),
                        "depth": np.arange(N, dtype=np.float64),
                        "barcode": [f"c{i}" for i in range(N)]})
    with DatasetWriter(root, n_genes=G, tile_size=TILE, level=3, n_chunks=2, obs_schema=ObsSchema.infer([obs])) as w:
        for lo in range(0, N, TILE):
            w.add_tile(full[lo : lo + TILE], obs=obs.iloc[lo : lo + TILE])
    return root, full, obs


def indices_of(loader):
    return [b["index"].numpy().copy() for b in loader]


def test_to_torch_csr_shares_memory_and_matches_dense(built):
    root, full, _ = built
    b = open_dataset(root).get_batch([3, 1, 4, 1])
    t = b.to_torch_csr()
    assert t.layout == torch.sparse_csr and t.shape == (4, G) and t.dtype == torch.float32
    assert np.array_equal(t.to_dense().numpy(), full[[3, 1, 4, 1]].toarray())
    assert np.shares_memory(t.col_indices().numpy(), b.indices) and np.shares_memory(t.values().numpy(), b.values)
    assert open_dataset(root).get_batch([]).to_torch_csr().shape == (0, G)
    assert np.array_equal(b.to_torch_dense().numpy(), full[[3, 1, 4, 1]].toarray())
    huge = SparseBatch(np.array([0, 2**31], np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), 5)
    with pytest.raises(OverflowError):
        huge.to_torch_csr()


def test_an_epoch_serves_every_cell_once_and_the_batches_hold_the_rows(built, tmp_path):
    root, full, obs = built
    ds = DeltaCellsIterableDataset(root, 32, shuffle_tiles=3, seed=7, obs_columns=["cell_type", "depth", "barcode"],
                                   cache_dir=str(tmp_path / "c"))
    batches = list(ds)
    assert len(batches) == len(ds) == int(np.ceil(N / 32))
    idx = np.concatenate([b["index"].numpy() for b in batches])
    assert sorted(idx.tolist()) == list(range(N)) and idx.tolist() != list(range(N))
    for b in batches[:5]:
        i = b["index"].numpy()
        assert b["X"].layout == torch.sparse_csr and b["X"].dtype == torch.float32
        assert np.array_equal(b["X"].to_dense().numpy(), full[i].toarray())
        vocab = ds.categories("cell_type")
        assert [vocab[c] for c in b["obs"]["cell_type"].tolist()] == list(obs["cell_type"].iloc[i])
        assert torch.equal(b["obs"]["depth"], torch.from_numpy(obs["depth"].to_numpy()[i]))
        assert b["obs"]["barcode"] == [f"c{j}" for j in i]
    # Windows of 3 tiles (at least 120 cells each): the first 100 cells of the stream mix cells of the first window's
    # tiles, and of no others.
    assert 2 <= len(set((idx[:100] // TILE).tolist())) <= 3


def test_cell_order_epochs_and_output_kinds(built):
    root, full, _ = built
    plain = DeltaCellsIterableDataset(root, 64, shuffle=False)
    assert np.concatenate(indices_of(plain)).tolist() == list(range(N))
    ds = DeltaCellsIterableDataset(root, 64, seed=1)
    ds.set_epoch(0)
    a = indices_of(ds)
    ds.set_epoch(0)
    assert all(np.array_equal(x, y) for x, y in zip(a, indices_of(ds))), "an epoch is reproducible"
    ds.set_epoch(1)
    assert not all(np.array_equal(x, y) for x, y in zip(a, indices_of(ds))), "epochs differ"
    dense = next(iter(DeltaCellsIterableDataset(root, 16, output="dense", values_dtype=torch.int32)))
    assert dense["X"].dtype == torch.int32 and dense["X"].shape == (16, G)
    assert np.array_equal(dense["X"].numpy(), full[dense["index"].numpy()].toarray().astype(np.int32))
    with pytest.raises(ValueError):
        DeltaCellsIterableDataset(root, 16, output="coo")
    # numpy's spellings of the two value types, as get_batch takes them, mean the torch ones.
    for spelling, want in ((np.int32, torch.int32), (np.dtype("float32"), torch.float32), ("int32", torch.int32)):
        assert next(iter(DeltaCellsIterableDataset(root, 16, values_dtype=spelling)))["X"].values().dtype == want
    for workers in (0, 2):  # through make_loader too, the workers given the torch dtype
        b = next(iter(make_loader(root, 16, values_dtype=np.int32, num_workers=workers)))
        assert b["X"].values().dtype == torch.int32
    for wrong in (torch.float64, np.float64, "int64", object()):
        with pytest.raises(ValueError, match="float32 or int32|int32 or float32"):
            DeltaCellsIterableDataset(root, 16, values_dtype=wrong)


@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("remainder", ["drop", "wrap"])
def test_ranks_and_workers_split_the_epoch(built, world, workers, remainder):
    root, _, _ = built
    per_rank = []
    for rank in range(world):
        loader = make_loader(root, 20, rank=rank, world_size=world, num_workers=workers, seed=3, remainder=remainder)
        got = indices_of(loader)
        assert len(got) == len(loader.dataset)
        per_rank.append(np.concatenate(got) if got else np.zeros(0, np.int64))
    assert len({len(p) for p in per_rank}) == 1, "every rank serves as many cells"
    assert len({len(make_loader(root, 20, rank=r, world_size=world).dataset) for r in range(world)}) == 1
    every = np.concatenate(per_rank)
    if remainder == "drop":
        assert len(np.unique(every)) == len(every) == N // world * world, "no cell on two ranks"
    else:
        assert np.array_equal(np.unique(every), np.arange(N)) and len(every) == -(-N // world) * world
    if N % world == 0 and remainder == "drop":
        assert sorted(every.tolist()) == list(range(N))


RESUME = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from deltacells.torch import make_loader
    root, state, workers = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    loader = make_loader(root, 24, seed=11, num_workers=workers, shuffle_tiles=2)
    loader.load_state_dict(state)
    print(json.dumps([b["index"].tolist() for b in loader]))
    """
)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_in_a_fresh_process_yields_the_rest_of_the_epoch(built, workers):
    root, _, _ = built
    whole = make_loader(root, 24, seed=11, num_workers=workers, shuffle_tiles=2)
    whole.set_epoch(2)
    expected = [b.tolist() for b in indices_of(whole)]
    for k in (0, 3, 7, len(expected)):
        loader = make_loader(root, 24, seed=11, num_workers=workers, shuffle_tiles=2)
        loader.set_epoch(2)
        it = iter(loader)
        for _ in range(k):
            next(it)
        state = loader.state_dict()
        if k == len(expected):
            # A finished epoch resumes as the next one, whole (test_torch_resume.py).
            assert (state["epoch"], state["batches"]) == (3, 0)
            continue
        assert state["batches"] == k and state["epoch"] == 2
        out = subprocess.run([sys.executable, "-c", RESUME, root, json.dumps(state), str(workers)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == expected[k:], f"resumed after {k}"


DDP = textwrap.dedent(
    """
    import json, os, sys
    import torch, torch.distributed as dist
    from deltacells.torch import make_loader

    def run(rank, root, port, out, n_genes):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        dist.init_process_group("gloo", rank=rank, world_size=2)
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(n_genes, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = make_loader(root, 32, seed=5)   # rank and world size from torch.distributed
        seen, losses = [], []
        for step, batch in enumerate(loader):
            loss = model(batch["X"].to_dense()).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            seen.extend(batch["index"].tolist()); losses.append(float(loss))
            if step == 4:
                break
        weights = [p.detach().flatten().tolist() for p in model.parameters()]
        json.dump({"rank": dist.get_rank(), "seen": seen, "n": len(loader), "weights": weights},
                  open(f"{out}/{rank}.json", "w"))
        # Both ranks done before the group goes: a rank tearing gloo down while the other still talks to it can
        # abort the process ("terminate called without an active exception").
        del loader, batch, model, opt
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        root, port, out, n_genes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        torch.multiprocessing.spawn(run, args=(root, port, out, n_genes), nprocs=2)
    """
)


def test_distributed_data_parallel_over_two_processes(built, tmp_path):
    import socket

    root, _, _ = built
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    r = subprocess.run([sys.executable, str(script), root, port, str(tmp_path), str(G)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = (json.loads((tmp_path / f"{k}.json").read_text()) for k in (0, 1))
    assert a["n"] == b["n"] == (N // 2 + 31) // 32, "every rank has as many batches"
    assert not set(a["seen"]) & set(b["seen"]), "no cell on both ranks"
    assert len(a["seen"]) == len(b["seen"]) == 5 * 32
    assert a["weights"] == b["weights"], "DDP kept the replicas in step"


def test_prefetching_ahead_keeps_a_throttled_store_from_stalling(built):
    import time

    root, _, _ = built
    slow = ThrottledBackend(LocalBackend(root), latency_s=0.05, bandwidth_bytes_per_s=20e6)
    ds = DeltaCellsIterableDataset(slow, 20, shuffle_tiles=1, seed=2, memory_budget=64 << 20, io_threads=4)
    it = iter(ds)
    next(it)
    after_first = ds.stats()["stall_seconds"]
    n = 1
    for _ in it:
        time.sleep(0.02)  # the training step, during which the next tiles arrive
        n += 1
    s = ds.stats()
    assert n == len(ds) and s["tiles_fetched"] == 10
    stalled_later = s["stall_seconds"] - after_first
    assert stalled_later < 0.1 * s["fetch_seconds"], (stalled_later, s)


def test_opening_a_loader_reads_the_manifest_once(built):
    """The loader sizes its cache from the manifest; on object storage each read of it is a round trip before the
    first tile is asked for."""
    from deltacells import CountingBackend

    root, full, _ = built
    counting = CountingBackend(LocalBackend(root))
    ds = DeltaCellsIterableDataset(counting, 20, shuffle_tiles=2, seed=3, memory_budget=64 << 20)
    assert [name for name, _, _ in counting.log] == ["manifest.json"]
    assert ds.dataset.max_cached_tiles > 2, "the cache was sized from the manifest"
    rows = {}
    for b in ds:
        for i, row in zip(b["index"].tolist(), b["X"].to_dense().numpy()):
            rows[i] = row
    assert len(rows) == N and same(np.stack([rows[i] for i in range(N)]), full.toarray())
    tiles = [name for name, _, _ in counting.log if name.startswith("tiles/")]
    assert sorted(tiles) == sorted(set(tiles)) and len(tiles) == 10, "one read per tile"
    assert [name for name, _, _ in counting.log].count("manifest.json") == 1


def test_the_last_windows_prefetch_the_next_epoch(built):
    import time

    root, _, _ = built
    nnz = open_dataset(root).manifest.tile_nnz
    # Room for 3 decoded tiles (about 4 bytes per nonzero): windows of 1 tile, 2 fetched ahead; and for the 4 batches
    # of 20 cells the loader may hold (each at most every gene).
    from deltacells import _batch_slots, _core

    budget = int(3 * 4 * max(nnz)) + _batch_slots.MAX_LOCAL_SLOTS * _core.batch_slot_bytes(20 * (12 + 8 * G))
    slow = ThrottledBackend(LocalBackend(root), latency_s=0.05, bandwidth_bytes_per_s=20e6)
    # Seed 2: the first tile of epoch 1 is none of the last 3 of epoch 0 (those stay cached anyway).
    ds = DeltaCellsIterableDataset(slow, 20, shuffle_tiles=1, seed=2, memory_budget=budget, io_threads=4)
    for _ in ds:
        time.sleep(0.02)  # the training step
    before = ds.stats()
    ds.set_epoch(1)
    n = 0
    for _ in ds:
        n += 1
        time.sleep(0.02)
    s = ds.stats()
    assert n == len(ds)
    # The counters are an attribute too, as a dataset's are.
    assert ds.stats["tiles_fetched"] == s["tiles_fetched"] and isinstance(ds.stats.get("stall_seconds"), float)
    # Without the prefetch across the boundary, the new epoch's first batch waits a whole fetch (>= 50 ms).
    stalled = s["stall_seconds"] - before["stall_seconds"]
    assert stalled < 0.025, (stalled, before, s)


def _rows(batch):
    return batch.to_scipy()


class _Batches(torch.utils.data.IterableDataset):
    def __init__(self, ds, parts):
        self.ds, self.parts = ds, parts

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        for k, idx in enumerate(self.parts):
            if k % n == w:
                self.ds.prefetch_cells(idx)
                b = self.ds.get_batch(idx)
                yield k, torch.from_numpy(b.to_scipy().toarray())


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pickled_dataset_in_dataloader_workers(built, workers):
    root, full, _ = built
    ds = open_dataset(root)
    ds.get_batch([0])  # a live reader in the parent, forked into the workers
    parts = np.array_split(np.random.default_rng(4).permutation(N), 10)
    loader = torch.utils.data.DataLoader(_Batches(ds, parts), batch_size=None, num_workers=workers)
    got = dict((k, x) for k, x in loader)
    assert sorted(got) == list(range(10))
    for k, idx in enumerate(parts):
        assert np.array_equal(got[k].numpy(), full[idx].toarray())


@pytest.mark.parametrize("case", ["v1_with_obs", "v2_with_obs"])
def test_the_loader_reads_version_1_and_2_datasets(case, tmp_path):
    from conftest import CONFORMANCE, expected_csr, load_json

    root = str(CONFORMANCE / "datasets" / case)
    truth = expected_csr(load_json(CONFORMANCE / "datasets" / f"{case}.expected.json"))
    ds = DeltaCellsIterableDataset(root, 64, obs_columns=["cell_type"], cache_dir=str(tmp_path / "c"),
                                   values_dtype=torch.int32)
    seen = []
    for b in ds:
        i = b["index"].numpy()
        assert np.array_equal(b["X"].to_dense().numpy(), truth[i].toarray())
        assert len(b["obs"]["cell_type"]) == len(i)
        seen.extend(i.tolist())
    assert sorted(seen) == list(range(truth.shape[0]))


def test_numeric_options_are_whole_numbers_in_range(built):
    root, _, _ = built
    for option, value, error in (("batch_size", 2.7, TypeError), ("batch_size", 0, ValueError),
                                 ("shuffle_tiles", 1.5, TypeError), ("decode_threads", 0, ValueError),
                                 ("io_threads", 0, ValueError), ("memory_budget", -5, ValueError),
                                 ("seed", 1.5, TypeError)):
        kwargs = {"batch_size": 32, option: value}
        with pytest.raises(error, match=option):
            DeltaCellsIterableDataset(root, **kwargs)
    with pytest.raises(ValueError, match="rank"):
        DeltaCellsIterableDataset(root, 32, rank=-1, world_size=2)
    ds = DeltaCellsIterableDataset(root, 32.0)  # a whole float is a whole number
    assert ds.batch_size == 32
    for epoch, error in ((1.5, TypeError), ("3", TypeError), (-1, ValueError)):
        with pytest.raises(error, match="epoch"):
            ds.set_epoch(epoch)


def test_a_loader_whose_epoch_has_no_batch_is_refused_where_it_is_made(built):
    """An epoch of no batches ends every training loop at once, silently: refused when the dataset is made (one
    part), when a DeltaCellsDataLoader takes it (its workers' parts) and in a plain DataLoader's workers (known
    only there); a split that leaves batches is served."""
    root, _, _ = built
    with pytest.raises(ValueError, match="no batches on rank 0 of 1: 470 cells in batches of 5000 with drop_last"):
        DeltaCellsIterableDataset(root, 5000, drop_last=True)
    with pytest.raises(ValueError, match="no batches on rank 1 of 500"):
        DeltaCellsIterableDataset(root, 1, rank=1, world_size=500, remainder="drop")
    # 470 cells in batches of 300 make 1 without workers; 2 workers each end their share in a short batch.
    alone = DeltaCellsIterableDataset(root, 300, drop_last=True)
    assert len(list(alone)) == 1
    with pytest.raises(ValueError, match="split among 2 workers; use a smaller batch_size, drop_last=False, fewer"):
        make_loader(root, 300, drop_last=True, num_workers=2)
    plain = torch.utils.data.DataLoader(DeltaCellsIterableDataset(root, 300, drop_last=True), batch_size=None,
                                        num_workers=2)
    with pytest.raises(ValueError, match="split among 2 workers"):
        list(plain)
