"""Python against Rust on the same data, in one process, rounds alternating (the machines are shared and noisy).

    cargo run --release -p dct-bench --bin synthetic-dataset     # prints DATASET (built once)
    cargo xtask python --release --install-only                   # a release build of the package in the venv
    $HOME/.cache/deltacells-venv/bin/python crates/dct-python/benches/bench_python.py DATASET

Three comparisons (medians over rounds, and the ratio of each round's pair):

* reader: an epoch of shuffled 5,000-cell batches (tiles in random order, cells shuffled within each tile, the
  current tile and the next 4 prefetched; the same order on both sides, from the epoch planner), 2 decode threads:
  ``DeltaCellsDataset.get_batch`` into reused buffers from Python, against the Rust reader running the same epoch
  (``deltacells bench``, run in this process).
* decode: ``Tile.decode`` of tile 0 (the codec benchmark's tile: 10,000 synthetic cells, level 19, 8 chunks), one
  thread, CRC checked, into reused buffers, against the Rust decoder (``deltacells bench --tiles 0,0`` less
  ``--tiles 0``: the second of two decodes into a reused buffer), one decode of each in turn.
* threads: the epoch's tiles read by 2 Python threads at once (each half of them, ``decode_threads=1``) against
  one thread reading all of them, on one dataset; beside it, the machine's own 2-thread scaling of the decode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time

import deltacells
import numpy as np
from deltacells.cli import main as cli


def rust_bench(path: str, *args: str) -> dict:
    """`deltacells bench PATH ARGS --json` in this process (the Rust loop, no Python in it); its JSON."""
    with tempfile.TemporaryFile(mode="w+b") as out:
        saved = os.dup(1)
        os.dup2(out.fileno(), 1)
        try:
            code = cli(["bench", path, *args, "--json"])
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        text = out.read().decode()
    if code != 0:
        raise SystemExit(f"deltacells bench failed ({code}): {text}")
    return json.loads(text)


def epoch_order(ds: deltacells.DeltaCellsDataset, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(ds.n_tiles)
    cells = [rng.permutation(np.arange(*ds.tile_bounds(int(t)))) for t in order]
    tile_of = np.repeat(order, [len(c) for c in cells])
    return order, np.concatenate(cells).astype(np.int64), tile_of


def python_epoch(path: str, threads: int, batch: int, prefetch: int, seed: int) -> float:
    """Cells per second of one epoch through the Python API, in the order `deltacells bench --pattern tiles` reads
    (the same epoch planner and seed), the same tiles prefetched."""
    ds = deltacells.DeltaCellsDataset(
        path, max_cached_tiles=2, max_prefetch_tiles=max(1, prefetch), decode_threads=threads, io_threads=2, verify=True
    )
    plan = deltacells._core.EpochPlan(ds.manifest.tile_cells, batch, True, 1, seed, False, "drop", 0, 1, 0, 1, 0, 0)
    cap = 2 * max(ds.manifest.tile_nnz)
    oi, ov = np.empty(cap, np.int32), np.empty(cap, np.float32)
    n = 0
    start = time.perf_counter()
    for j in range(plan.n_batches()):
        if prefetch:
            ds.prefetch(plan.tiles_ahead(j, 1 + prefetch))
        cells = plan.batch(j)
        ds.get_batch(cells, out_indices=oi, out_values=ov)
        n += len(cells)
    seconds = time.perf_counter() - start
    ds.close()
    return n / seconds


def python_decode(tile: deltacells.Tile, oi: np.ndarray, ov: np.ndarray) -> float:
    """Seconds of one decode of ``tile`` from Python (CRC checked, one thread, into reused buffers)."""
    start = time.perf_counter()
    tile.verify()
    tile.decode(values=np.float32, threads=1, out_indices=oi, out_values=ov)
    return time.perf_counter() - start


def decode_scaling(tile: deltacells.Tile, n: int = 4) -> float:
    """Decodes per second of two Python threads each decoding ``tile`` ``n`` times (one thread each, own
    buffers) over one thread doing it alone: how far this machine's two cores scale this work at all."""
    bufs = [(np.empty(tile.nnz, np.int32), np.empty(tile.nnz, np.float32)) for _ in range(2)]
    for oi, ov in bufs:
        tile.decode(values=np.float32, out_indices=oi, out_values=ov)

    def run(k: int) -> None:
        for _ in range(n):
            tile.decode(values=np.float32, out_indices=bufs[k][0], out_values=bufs[k][1])

    start = time.perf_counter()
    run(0)
    one = n / (time.perf_counter() - start)
    workers = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return 2 * n / (time.perf_counter() - start) / one


def threaded_epoch(path: str, n_threads: int, batch: int, seed: int) -> float:
    """Cells per second when `n_threads` Python threads read the epoch's tiles (each its share) from one dataset
    with one decode thread per call."""
    ds = deltacells.DeltaCellsDataset(path, max_cached_tiles=2 * n_threads, max_prefetch_tiles=2, decode_threads=1)
    order, seq, tile_of = epoch_order(ds, seed)
    shares = [[int(t) for t in order[k::n_threads]] for k in range(n_threads)]
    cap = 2 * max(ds.manifest.tile_nnz)

    def work(tiles: list[int]) -> None:
        oi, ov = np.empty(cap, np.int32), np.empty(cap, np.float32)
        rng = np.random.default_rng(seed + tiles[0])
        for t in tiles:
            cells = rng.permutation(np.arange(*ds.tile_bounds(t)))
            for lo in range(0, len(cells), batch):
                ds.get_batch(cells[lo : lo + batch], out_indices=oi, out_values=ov)

    workers = [threading.Thread(target=work, args=(s,)) for s in shares]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    ds.close()
    return len(seq) / seconds


def summary(name: str, rust: list[float], py: list[float], unit: str, higher_is_better: bool) -> None:
    ratios = [p / r if higher_is_better else r / p for r, p in zip(rust, py)]
    print(
        f"{name:<8} Rust median {statistics.median(rust):>12.4g} {unit}   Python median {statistics.median(py):>12.4g} "
        f"{unit}   Python/Rust speed, per round: {', '.join(f'{x:.3f}' for x in ratios)}; "
        f"median {statistics.median(ratios):.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--rounds", type=int, default=7, help="epochs of each reader and threads pair")
    ap.add_argument("--decode-rounds", type=int, default=10, help="rounds of 6 decodes each")
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--prefetch", type=int, default=4)
    args = ap.parse_args()
    ds = deltacells.open_dataset(args.dataset)
    n_cells = ds.n_cells
    print(f"dataset {args.dataset}: {n_cells} cells x {ds.n_genes} genes, {ds.n_tiles} tiles, "
          f"{ds.manifest.nnz} nonzeros")
    ds.close()

    # decode: 6 decodes of tile 0 by the Rust decoder (one call: the first grows its buffers), then 6 from Python
    # into fresh buffers likewise; the means, round after round.
    tile = deltacells.Tile(open(os.path.join(args.dataset, "tiles", "tile_000000.dct"), "rb").read())
    decode: tuple[list[float], list[float]] = ([], [])
    for _ in range(args.decode_rounds):
        tiles = ",".join(["0"] * 6)
        decode[0].append(
            rust_bench(args.dataset, "--threads", "1", "--tiles", tiles, "--max-cells", "0")["tile_decode_seconds"]
        )
        oi, ov = np.empty(tile.nnz, np.int32), np.empty(tile.nnz, np.float32)
        decode[1].append(statistics.fmean(python_decode(tile, oi, ov) for _ in range(6)))
    summary("decode", decode[0], decode[1], "s/tile", False)
    floor = [decode_scaling(tile) for _ in range(args.decode_rounds)]
    print(
        f"floor    the machine's own scaling of that decode, 2 threads / 1 (each its own buffers): "
        f"{', '.join(f'{x:.2f}' for x in floor)}; median {statistics.median(floor):.2f}"
    )

    reader: tuple[list[float], list[float]] = ([], [])
    threads: tuple[list[float], list[float]] = ([], [])
    for r in range(args.rounds):
        seed = 100 + r
        rust = rust_bench(
            args.dataset, "--threads", "2", "--batch-size", str(args.batch_size), "--max-cells", str(n_cells),
            "--prefetch", str(args.prefetch), "--sample-tiles", "1", "--seed", str(seed),
        )
        reader[0].append(rust["batch_cells_per_second"])
        reader[1].append(python_epoch(args.dataset, 2, args.batch_size, args.prefetch, seed))
        threads[0].append(threaded_epoch(args.dataset, 1, args.batch_size, seed))
        threads[1].append(threaded_epoch(args.dataset, 2, args.batch_size, seed))
        print(
            f"round {r}: reader Rust {reader[0][-1]:.0f} / Python {reader[1][-1]:.0f} cells/s; "
            f"1 / 2 Python threads {threads[0][-1]:.0f} / {threads[1][-1]:.0f} cells/s",
            flush=True,
        )
    summary("reader", reader[0], reader[1], "cells/s", True)
    ratios = [b / a for a, b in zip(*threads)]
    print(
        f"threads  1 thread median {statistics.median(threads[0]):.0f} cells/s, 2 threads "
        f"{statistics.median(threads[1]):.0f} cells/s; 2 / 1 per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
        f"median {statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
