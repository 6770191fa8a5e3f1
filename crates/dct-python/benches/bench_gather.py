"""Where a warm loader's time goes: gathering a batch's rows out of decoded tiles, with the rows fresh from memory
(as an epoch reads them) and with the same rows already in the caches, against the machine's memory bandwidth.

    python bench_gather.py DATASET [--batch-size 1024] [--rounds 3] [--batches 200]

One loader (``make_loader``, no workers, a memory budget above the dataset's decoded tiles) runs one untimed epoch,
which decodes every tile; from then on nothing is decoded and a batch costs only its gathering. Per round:

* ``loader``: one whole epoch of the loader (cells per second, and microseconds a batch);
* ``take, rows from memory``: the first ``--batches`` batches of that epoch's plan, each gathered once into the
  loader's reused slots (``_batch_slots.SlotPool.take``: planning, the rows out of the tiles' planes, the tensors):
  each batch reads rows of its window's tiles that no batch before it read;
* ``take, rows in cache``: one of those batches gathered ``--batches`` times: its rows' planes (about 4 bytes a
  nonzero) stay in the caches, so the difference from the line above is the waiting on memory;
* ``copy``: numpy copying 256 MiB to another 256 MiB, the bandwidth of plain reads and writes on this machine.

After the rounds, one more epoch of the loader with each call it makes for a batch timed (the take, the epoch plan's
``batch`` and ``tiles_ahead``, the reader's ``prefetch``): microseconds a batch for each, beside the epoch's.

Each take moves about 12 bytes a nonzero (4 read from the planes, 8 written as a column index and a float32 count);
the line ``bytes moved`` is that figure over the take's time, to set against ``copy`` (which reads and writes 2 bytes
per byte copied).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, cast

import numpy as np
from deltacells import _batch_slots
from deltacells._torch_dataset import DeltaCellsIterableDataset
from deltacells.torch import make_loader


def copy_bandwidth(mib: int = 256, reps: int = 5) -> float:
    """Bytes read plus written per second by ``np.copyto`` of ``mib`` MiB (the best of ``reps``)."""
    src = np.ones(mib << 18, np.float32)
    dst = np.zeros_like(src)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def takes(pool: _batch_slots.SlotPool, ds: Any, batches: list[np.ndarray], n_genes: int) -> float:
    """Mean seconds of a take of each of ``batches`` into the pool's slots (each batch dropped at once, so its slot
    is free for the next)."""
    start = time.perf_counter()
    for cells in batches:
        out = pool.take(ds, cells, np.float32, n_genes, {})
        del out
    return (time.perf_counter() - start) / len(batches)


def timed_calls(loader: Any, it: DeltaCellsIterableDataset, ds: Any, epoch: int) -> None:
    """One epoch of ``loader`` with the calls it makes for each batch timed (wrappers around them, in this process
    only), printed as microseconds a batch."""
    spent: dict[str, float] = {}

    def timed(name: str, f: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
        return call

    class TimedPlan:
        def __init__(self, plan: Any) -> None:
            self._plan = plan

        def __getattr__(self, name: str) -> Any:
            f = getattr(self._plan, name)
            return timed(f"plan.{name}", f) if name in ("batch", "tiles_ahead") else f

    take, make_plan, prefetch = _batch_slots.SlotPool.take, it._plan, ds.prefetch
    _batch_slots.SlotPool.take = timed("take", take)  # type: ignore[method-assign]
    it._plan = lambda *a, **k: TimedPlan(make_plan(*a, **k))  # type: ignore[method-assign,assignment]
    ds.prefetch = timed("prefetch", prefetch)
    try:
        loader.set_epoch(epoch)
        start, batches = time.perf_counter(), 0
        for _ in loader:
            batches += 1
        wall = time.perf_counter() - start
    finally:
        _batch_slots.SlotPool.take = take  # type: ignore[method-assign]
        del it._plan, ds.prefetch
    calls = ", ".join(f"{k} {v / batches * 1e6:.0f}" for k, v in sorted(spent.items()))
    print(f"calls timed: {wall / batches * 1e6:.0f} us a batch; of which, us a batch: {calls}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--budget-mib", type=int, default=16384)
    args = ap.parse_args()

    loader = make_loader(args.dataset, args.batch_size, num_workers=0, seed=1, memory_budget=args.budget_mib << 20)
    it = cast(DeltaCellsIterableDataset, loader.dataset)
    loader.set_epoch(0)
    for _ in loader:  # untimed: decodes every tile
        pass
    ds = it._dataset(1)
    before = ds.stats["tiles_decoded"]
    pool = _batch_slots.pool(shared=False)
    n_genes = it.n_genes
    rates: dict[str, list[float]] = {"loader": [], "memory": [], "cache": [], "copy": []}
    for r in range(1, args.rounds + 1):
        loader.set_epoch(r)
        start, n, batches = time.perf_counter(), 0, 0
        for batch in loader:
            n += batch["X"].shape[0]
            batches += 1
        del batch
        loader_s = time.perf_counter() - start
        rates["loader"].append(loader_s / batches)

        plan = it._plan(0, 1, 0, r + 1000, (0, 1))
        cells = [plan.batch(j) for j in range(min(args.batches, plan.n_batches()))]
        nnz = sum(int(ds.batch_nnz(c)) for c in cells)
        memory_s = takes(pool, ds, cells, n_genes)
        rates["memory"].append(memory_s)

        same = cells[len(cells) // 2]
        same_nnz = int(ds.batch_nnz(same))
        takes(pool, ds, [same], n_genes)  # untimed: its rows into the caches
        cache_s = takes(pool, ds, [same] * len(cells), n_genes)
        rates["cache"].append(cache_s)
        copy = copy_bandwidth()
        rates["copy"].append(copy)
        mean_nnz = nnz / len(cells)
        print(f"round {r}: loader {n / loader_s:,.0f} cells/s ({loader_s / batches * 1e6:.0f} us a batch); take, "
              f"rows from memory {memory_s * 1e6:.0f} us a batch ({12 * mean_nnz / memory_s / 1e9:.1f} GB/s moved), "
              f"rows in cache {cache_s * 1e6:.0f} us ({12 * same_nnz / cache_s / 1e9:.1f} GB/s); copy "
              f"{copy / 1e9:.1f} GB/s", flush=True)
    timed_calls(loader, it, ds, args.rounds + 1)
    decoded = ds.stats["tiles_decoded"] - before
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"medians: loader {med['loader'] * 1e6:.0f} us a batch, take from memory {med['memory'] * 1e6:.0f}, "
          f"in cache {med['cache'] * 1e6:.0f} (in cache / from memory {med['cache'] / med['memory']:.2f}); copy "
          f"{med['copy'] / 1e9:.1f} GB/s; tiles decoded after the first epoch: {decoded}")


if __name__ == "__main__":
    main()
