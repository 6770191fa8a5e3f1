"""Plots tile size against encode and decode time for the zstd levels and presets.

Usage: DCT_BENCH_OUT=/tmp/presets.csv cargo bench -p dct-bench --bench presets
       python crates/dct-bench/benches/plot_presets.py /tmp/presets.csv docs/zstd_presets.png

One panel per input (the synthetic benchmark tile, a real dataset's tiles): bytes per nonzero on the x axis, encode
time relative to plain level 19 (measured in the same rounds) on the y axis, one point per configuration labelled
with its name and decode time relative to plain level 19.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, out: str) -> None:
    rows: dict[str, list[dict[str, str]]] = defaultdict(list)
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            rows[row["input"]].append(row)
    fig, axes = plt.subplots(1, len(rows), figsize=(6.5 * len(rows), 5), squeeze=False)
    for ax, (name, items) in zip(axes[0], rows.items()):
        for r in items:
            x, y = float(r["bytes_per_nnz"]), float(r["encode_vs_plain19"])
            colour = {"plain": "tab:blue", "tuned": "tab:green", "fast": "tab:orange"}[r["preset"]]
            ax.scatter(x, y, color=colour, s=40)
            ax.annotate(
                f'{r["config"]}\ndecode {float(r["decode_vs_plain19"]):.2f}x',
                (x, y),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
        ax.set_title(f"{name}: size vs encode time (1 thread)")
        ax.set_xlabel("bytes per nonzero (tiles)")
        ax.set_ylabel("encode time / plain level 19")
        ax.grid(alpha=0.3)
    fig.legend(
        handles=[
            plt.Line2D([], [], marker="o", linestyle="", color=c, label=l)
            for l, c in [("plain level", "tab:blue"), ("tuned level", "tab:green"), ("fast preset", "tab:orange")]
        ],
        loc="upper right",
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_presets.py PRESETS.csv OUT.png")
    main(sys.argv[1], sys.argv[2])
