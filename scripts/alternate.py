#!/usr/bin/env python3
"""Times two commands run in turn, A B A B ..., and prints each one's wall, CPU and peak memory (min, median, max)
and the ratio A/B taken pair by pair, so that a machine whose speed drifts during the run still gives a fair ratio.

    python scripts/alternate.py [-n PAIRS] [--warmup N] --a 'COMMAND A' --b 'COMMAND B'

Each command is one string split as a shell splits words and run without a shell (write ``sh -c '...'`` for pipes,
``&&`` or globs); its output is discarded. Wall time is read around the process; CPU (user + system) and peak
resident memory are the kernel's accounting of that one child (``wait4``). Quote the medians.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import time


def run(cmd: list[str]) -> tuple[float, float, float, int]:
    """One run: wall seconds, CPU seconds, peak MiB, exit status."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, p.returncode


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=5, help="pairs measured (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted (default 1)")
    p.add_argument("--a", required=True, help="command A")
    p.add_argument("--b", required=True, help="command B (the yardstick)")
    args = p.parse_args()
    a, b = shlex.split(args.a), shlex.split(args.b)
    for _ in range(args.warmup):
        run(a)
        run(b)
    rows: dict[str, list[tuple[float, float, float, int]]] = {"A": [], "B": []}
    for _ in range(args.n):
        rows["A"].append(run(a))
        rows["B"].append(run(b))
    for name in ("A", "B"):
        r = rows[name]
        print(f"{name}: wall {spread([x[0] for x in r])} s, cpu {spread([x[1] for x in r])} s, "
              f"peak {spread([x[2] for x in r])} MiB, exit {sorted({x[3] for x in r})}  (min / median / max)")
    ratios = [x[0] / y[0] for x, y in zip(rows["A"], rows["B"])]
    cpu = [x[1] / y[1] for x, y in zip(rows["A"], rows["B"]) if y[1] > 0]
    print(f"A/B wall, pair by pair: {', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")
    if cpu:
        print(f"A/B cpu median {statistics.median(cpu):.3f}")


if __name__ == "__main__":
    main()
