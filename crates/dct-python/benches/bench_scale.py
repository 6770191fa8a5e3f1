"""How each cost grows with the cells: the same synthetic atlas at 10^5, 10^6 and 10^7 cells.

    python bench_scale.py make WORKDIR [--cells 100000,1000000] [--levels 3,19] [--part-cells 1000000]
    python bench_scale.py run WORKDIR [--cells 100000,1000000] [--level 3] [--batch-size 1024] [--only warm,cold]
        [--memory-budget-mib 1024]
    python bench_scale.py one DATASET MODE BATCH_SIZE BUDGET_BYTES     # one measure in this process: a JSON line

``make`` writes each dataset with the ``scale-dataset`` binary of ``dct-bench`` (``cargo build --release -p dct-bench
--bin scale-dataset``; found in ``$CARGO_TARGET_DIR/release``, or give ``--bin``): seeded synthetic counts of about
2,000 nonzeros a cell over 36,000 genes and 20 obs columns (a distinct barcode per cell, categories of 10 to 50,000
values), tiles of 10,000 cells. Its line per dataset (cells/s written, CPU seconds and the writer's peak memory) is
kept in ``WORKDIR/written.jsonl``. With ``--part-cells N``, a dataset of more cells is written as parts of N cells
(whole tiles; one process each, into ``WORKDIR/cells{n}-l{level}.parts``), skipping the parts already complete, and
the parts are merged in order with ``deltacells merge`` (aligned tiles are hard-linked, not copied): a write too
long for one sitting can be stopped and run again, and the dataset is the one a single process writes. The whole's
line sums the parts' seconds and CPU seconds and adds the merge's, with the largest peak of any of them.

``run`` measures, per dataset, each in a process of its own (so peaks do not carry over):

* ``info``: ``deltacells info --json``, wall time (median of 3);
* ``verify``: ``deltacells verify`` (every tile's CRC and structure) with the tiles out of the page cache, wall time;
* ``obs``: every obs column localized into a new cache directory, wall time and cache bytes;
* ``report``: ``deltacells report`` (its default sample of tiles, every obs column summarized) into a page in a
  temporary directory, with a new obs cache (``DELTACELLS_CACHE``): wall time, peak memory and the page's bytes;
* ``warm``: an epoch of a new ``make_loader`` (no workers, batch ``--batch-size``, windows of 4 tiles, the memory
  budget, tiles' CRC checked) after an untimed epoch of another one (the page cache holds what fits);
* ``cold``: the same epoch after every tile file is dropped from the page cache (``posix_fadvise(DONTNEED)``; no
  root needed);
* ``throttled``: an epoch over a store answering each request after 30 ms plus an exponential jitter of 10 ms mean,
  at 100 MB/s per request: the local dataset read by the Rust reader as it reads object storage, every request
  delayed (the store options ``simulate_latency_ms=30``, ``simulate_jitter_ms=10``, ``simulate_mb_per_s=100``,
  ``simulate_seed=1``), 8 I/O threads, each tile read as concurrent ranged GETs of 8 MiB parts (as object storage
  is);
* ``paced``: the throttled epoch with a training step after each batch (a sleep of 8 ms per 1,024 cells, a model
  taking 128,000 cells/s), as a training loop meets the store's tails: the loader either keeps ahead or stalls;
* ``throttled-whole``, ``paced-whole`` (not run unless named in ``--only``): the same with each tile read in one
  GET (the store option ``part_bytes=0``);
* ``throttled-python``, ``paced-python`` (not run unless named in ``--only``): the same through a Python backend
  (``deltacells.ThrottledBackend`` over a ``LocalBackend``), whose requests return Python ``bytes``, one GET a tile.

For the epochs: cells/s (from the start, and after the first batch), and the time between batches as the training
loop sees it (its step included when paced), p50, p99 and max over the batches after the first 5% (steady state;
the first batch's wait is reported apart), the share of the epoch spent waiting for batches, with the process's
peak resident memory (``ru_maxrss``) less its resident memory before the first loader (Python, torch and deltacells
imported), against the budget (``--memory-budget-mib``, default 1,024). Results go to
``WORKDIR/scale-l{level}-b{batch}-m{budget MiB}.json``. Per-cell figures and their ratios between sizes are printed as
a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET = 1 << 30
MODES = ("info", "verify", "obs", "report", "warm", "cold", "throttled", "paced")
EPOCHS = ("warm", "cold", "throttled", "paced", "throttled-whole", "paced-whole", "throttled-python", "paced-python")
# The throttled store: 30 ms a request plus an exponential tail of 10 ms mean, 100 MB/s a response body.
SIMULATED_STORE = {"simulate_latency_ms": "30", "simulate_jitter_ms": "10", "simulate_mb_per_s": "100",
                   "simulate_seed": "1"}
# A training step's time per 1,024 cells in the ``paced`` epoch: a model taking 128,000 cells/s.
STEP_S = 0.008


def dataset_path(work: Path, cells: int, level: int) -> Path:
    return work / f"cells{cells}-l{level}"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------- make


def run_measured(args: list[str]) -> tuple[str, float, float, int]:
    """Runs a command to its end: its stdout, wall seconds, CPU seconds (user and system) and peak resident bytes."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, args)
    return out.strip(), time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def make(work: Path, cells: list[int], levels: list[int], binary: str, part_cells: int, tile_size: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for n in cells:
        for level in levels:
            out = dataset_path(work, n, level)
            if (out / "manifest.json").exists():
                print(f"{out} exists", flush=True)
                continue
            args = [binary, "--cells", str(n), "--level", str(level), "--tile-size", str(tile_size)]
            if part_cells and n > part_cells:
                line = make_in_parts(work, out, n, part_cells, tile_size, args)
            else:
                print(f"writing {out} ...", flush=True)
                line = run_measured([*args, "--output", str(out)])[0]
            with open(work / "written.jsonl", "a") as f:
                f.write(line + "\n")
            print(line, flush=True)


def make_in_parts(work: Path, out: Path, n: int, part_cells: int, tile_size: int, args: list[str]) -> str:
    """Writes ``out`` as parts of ``part_cells`` cells merged in order; a part already complete is kept (whatever
    its size: a run stopped often may go on with smaller parts)."""
    if part_cells % tile_size:
        raise SystemExit(f"--part-cells {part_cells} is not a whole number of {tile_size}-cell tiles")
    parts_dir = out.with_name(out.name + ".parts")
    parts_dir.mkdir(exist_ok=True)
    log = parts_dir / "parts.jsonl"
    tiles, per_part = -(-n // tile_size), part_cells // tile_size
    parts, first = [], 0
    while first < tiles:
        # A complete part that begins here is kept whatever its size, so a run may go on with smaller parts.
        done = [p for p in parts_dir.glob(f"tiles{first:07d}-*") if (p / "manifest.json").exists()]
        if done:
            parts.append(done[0])
            first = int(done[0].name.split("-")[1])
            print(f"{done[0]} exists", flush=True)
            continue
        end = min(first + per_part, tiles)
        part = parts_dir / f"tiles{first:07d}-{end:07d}"
        parts.append(part)
        print(f"writing {part} ...", flush=True)
        line = run_measured([*args, "--tiles", f"{first}..{end}", "--output", str(part)])[0]
        with open(log, "a") as f:
            f.write(line + "\n")
        print(line, flush=True)
        first = end
    print(f"merging {len(parts)} parts into {out} ...", flush=True)
    cli = [sys.executable, "-m", "deltacells", "merge", *map(str, parts), "--output", str(out), "--overwrite"]
    _, merge_s, merge_cpu, merge_peak = run_measured(cli)
    written = {}
    for line in log.read_text().splitlines():  # the latest line of each part (a part may have been begun twice)
        entry = json.loads(line)
        written[tuple(entry["tile_range"])] = entry
    lines = [written[tuple(int(t) for t in p.name.removeprefix("tiles").split("-"))] for p in parts]
    seconds = sum(e["seconds"] for e in lines) + merge_s
    shutil.rmtree(parts_dir)  # the merged dataset holds the tiles (hard links)
    return json.dumps({
        "cells": n, "tiles": tiles, "nnz": sum(e["nnz"] for e in lines), "genes": lines[0]["genes"],
        "level": lines[0]["level"], "tile_size": tile_size, "bytes": du(out), "parts": len(lines),
        "seconds": seconds, "cells_per_s": n / seconds, "cpu_seconds": sum(e["cpu_seconds"] for e in lines) + merge_cpu,
        "merge_seconds": merge_s, "merge_cpu_seconds": merge_cpu, "merge_peak_rss_bytes": merge_peak,
        "peak_rss_bytes": max(e["peak_rss_bytes"] for e in lines),
        "writing_peak_bytes": max(e["writing_peak_bytes"] for e in lines),
    })


# ---------------------------------------------------------------------------------------------- one measure


def evict(path: Path) -> None:
    """Drops the dataset's tile files from the page cache (clean pages go without root)."""
    for p in (path / "tiles").iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cli_seconds(args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "deltacells", *args], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def epoch(loader, step_s: float = 0.0) -> dict[str, float]:
    """One epoch: cells/s (from the start, and after the first batch) and the time between batches as the loop sees
    it (first apart; p50/p99/max after the first 5%). ``step_s``: a training step's time, slept after each batch."""
    gaps, waits, n, first_cells = [], 0.0, 0, 0
    start = last = time.perf_counter()
    for b in loader:
        now = time.perf_counter()
        gaps.append(now - last)
        waits += now - last - (step_s if len(gaps) > 1 else 0.0)
        n += b["X"].shape[0]
        first_cells = first_cells or n
        if step_s:
            time.sleep(step_s)
        last = time.perf_counter() if not step_s else now
    seconds = time.perf_counter() - start
    steady = sorted(gaps[max(1, len(gaps) // 20):])
    pick = lambda q: steady[min(len(steady) - 1, int(q * len(steady)))] * 1e3  # noqa: E731
    first_batch = gaps[0]
    return {"cells": n, "seconds": seconds, "cells_per_s": n / seconds,
            "cells_per_s_after_first": (n - first_cells) / (seconds - first_batch),
            "batches": len(gaps), "first_batch_ms": first_batch * 1e3, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "max_ms": steady[-1] * 1e3, "waiting_share": waits / seconds, "step_ms": step_s * 1e3}


def rss_bytes() -> int:
    """The process's resident memory now (``VmRSS``)."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def measure(path: Path, mode: str, batch_size: int, budget: int) -> dict[str, object]:
    import deltacells
    from deltacells import LocalBackend, ThrottledBackend
    from deltacells.torch import make_loader

    if mode == "info":
        return {"seconds": cli_seconds(["info", str(path), "--json"], 3)}
    if mode == "verify":
        evict(path)
        return {"seconds": cli_seconds(["verify", str(path)], 1)}
    if mode == "report":
        scratch = Path(tempfile.mkdtemp(prefix="dct-scale-report-"))
        try:
            page = scratch / "report.html"
            # The peak is the report process's own (VmHWM of its memory after exec): a child's ru_maxrss would start
            # from this process's, torch included.
            script = ("import sys, deltacells; from deltacells.cli import main\n"
                      "code = main(['report', sys.argv[1], '--output', sys.argv[2]])\n"
                      "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
                      "print(int(hwm) * 1024); sys.exit(code)")
            os.environ["DELTACELLS_CACHE"] = str(scratch / "cache")  # a new obs cache (this process ends after)
            out, seconds, cpu, _ = run_measured([sys.executable, "-c", script, str(path), str(page)])
            return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_bytes": int(out.splitlines()[-1]),
                    "page_bytes": page.stat().st_size}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if mode == "obs":
        cache = tempfile.mkdtemp(prefix="dct-scale-obs-")
        try:
            ds = deltacells.open_dataset(str(path), cache_dir=cache)
            t0 = time.perf_counter()
            ds.obs.localize()
            return {"seconds": time.perf_counter() - t0, "cache_bytes": du(Path(cache)),
                    "columns": len(ds.obs.columns)}
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    baseline = rss_bytes()  # Python, torch and deltacells imported, no loader yet
    options = {"seed": 1, "shuffle_tiles": 4, "memory_budget": budget}
    if mode in ("throttled", "paced"):
        loader = make_loader(str(path), batch_size, io_threads=8, storage_options=SIMULATED_STORE, **options)
    elif mode in ("throttled-whole", "paced-whole"):
        whole = {**SIMULATED_STORE, "part_bytes": "0"}
        loader = make_loader(str(path), batch_size, io_threads=8, storage_options=whole, **options)
    elif mode in ("throttled-python", "paced-python"):
        uri = ThrottledBackend(LocalBackend(str(path)), latency_s=0.03, jitter_s=0.01, bandwidth_bytes_per_s=100e6)
        loader = make_loader(uri, batch_size, io_threads=8, **options)
    else:
        if mode == "warm":
            # The page cache filled by an epoch of another loader (this one starts without decoded tiles).
            epoch(make_loader(str(path), batch_size, **options))
            gc.collect()
        else:
            evict(path)
        loader = make_loader(str(path), batch_size, **options)
    result = epoch(loader, STEP_S * batch_size / 1024 if mode.startswith("paced") else 0.0)
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result["baseline_rss_bytes"] = baseline
    result["memory_budget"] = budget
    return result


# ---------------------------------------------------------------------------------------------- run


def run(work: Path, cells: list[int], level: int, batch_size: int, modes: list[str], budget: int) -> None:
    written = {}
    if (work / "written.jsonl").exists():
        for line in (work / "written.jsonl").read_text().splitlines():
            w = json.loads(line)
            written[(w["cells"], w["level"])] = w
    results: dict[str, dict[str, object]] = {}
    for n in cells:
        path = dataset_path(work, n, level)
        row: dict[str, object] = {"cells": n, "bytes": du(path), "written": written.get((n, level))}
        for mode in modes:
            child = [sys.executable, __file__, "one", str(path), mode, str(batch_size), str(budget)]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            row[mode] = json.loads(out.strip().splitlines()[-1])
            print(f"{n:>10,} {mode:<9} {row[mode]}", flush=True)
        results[str(n)] = row
    name = f"scale-l{level}-b{batch_size}-m{budget >> 20}.json"
    (work / name).write_text(json.dumps(results, indent=1))
    table(results, modes)


def table(results: dict[str, dict[str, object]], modes: list[str]) -> None:
    """Per-cell figures by size, and each size's ratio to the smallest."""
    rows = list(results.values())

    def per_cell(r: dict, key: str) -> float | None:
        if key == "write":
            w = r.get("written")
            return w["seconds"] / w["cells"] * 1e6 if w else None
        m = r.get(key)
        if not m:
            return None
        if key in EPOCHS:
            return 1e6 / m["cells_per_s"]
        return m["seconds"] / r["cells"] * 1e6

    keys = ["write"] + modes
    print("\nmicroseconds per cell (ratio to the smallest)")
    print(f"{'cells':>12} " + " ".join(f"{k:>16}" for k in keys))
    base = rows[0]
    for r in rows:
        cells = []
        for k in keys:
            v, b = per_cell(r, k), per_cell(base, k)
            cells.append(f"{v:8.2f} ({v / b:4.2f})" if v is not None and b else f"{'-':>16}")
        print(f"{r['cells']:>12,} " + " ".join(f"{c:>16}" for c in cells))
    print("\ntime between batches, ms (p50 / p99 / max; first batch) and peak RSS above the process before the"
          " loader, MiB")
    for r in rows:
        for k in EPOCHS:
            m = r.get(k)
            if m:
                print(f"{r['cells']:>12,} {k:<9} {m['p50_ms']:7.1f} / {m['p99_ms']:7.1f} / {m['max_ms']:7.1f};"
                      f" {m['first_batch_ms']:7.1f}   {(m['peak_rss_bytes'] - m['baseline_rss_bytes']) / 2**20:6.0f}"
                      f"   after the first batch {m['cells_per_s_after_first']:9,.0f} cells/s,"
                      f" waiting {m['waiting_share']:.0%}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        path, mode, batch, budget = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(measure(path, mode, batch, budget)))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["make", "run"])
    p.add_argument("workdir", type=Path)
    p.add_argument("--cells", default="100000,1000000")
    p.add_argument("--levels", default="3,19")
    p.add_argument("--level", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--only", default=",".join(MODES))
    p.add_argument("--memory-budget-mib", type=int, default=BUDGET >> 20)
    p.add_argument("--part-cells", type=int, default=0, help="make: write larger datasets as parts of this many cells")
    p.add_argument("--tile-size", type=int, default=10_000, help="make: cells a tile")
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    p.add_argument("--bin", default=str(Path(target) / "release" / "scale-dataset"))
    a = p.parse_args()
    cells = [int(c) for c in a.cells.split(",")]
    if a.command == "make":
        make(a.workdir, cells, [int(x) for x in a.levels.split(",")], a.bin, a.part_cells, a.tile_size)
    else:
        run(a.workdir, cells, a.level, a.batch_size, a.only.split(","), a.memory_budget_mib << 20)


if __name__ == "__main__":
    main()
