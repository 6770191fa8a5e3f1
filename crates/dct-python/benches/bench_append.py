"""Inputs and a base dataset for the append and subset benchmarks.

    python bench_append.py WORKDIR [--source ../shared/data/pbmc3k_raw.h5ad] [--inputs 40] [--bin deltacells]

Writes ``WORKDIR/inputs/part_NN.h5ad``: ``inputs + 1`` copies of the source's cells (2,700 PBMC cells each), cell
names made unique per copy, and converts the first ``inputs`` of them (108,000 cells) at the default level into
``WORKDIR/base.dct`` (tiles of 10,000 cells: the last holds 8,000) and into ``WORKDIR/base9000.dct`` (tiles of
9,000: all full) with the command line. ``docs/BENCHMARKS.md`` times ``deltacells append`` of the last copy to
(a hard-linked copy of) the base against converting all ``inputs + 1`` copies again, and a subset of about 10% of
the cells by an obs condition (printed here), and merges of two such datasets (``base9000.dct`` twice: every tile
copied; ``base.dct`` twice: the second's cells cut anew) against converting both again, with ``scripts/alternate.py``.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import anndata as ad
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdir", type=Path)
    p.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[4] / "shared/data/pbmc3k_raw.h5ad")
    p.add_argument("--inputs", type=int, default=40)
    p.add_argument("--bin", default=str(Path.home() / ".cache/dct-target/release/deltacells"))
    a = p.parse_args()
    source = ad.read_h5ad(a.source)
    (a.workdir / "inputs").mkdir(parents=True, exist_ok=True)
    for i in range(a.inputs + 1):
        part = source.copy()
        part.obs_names = [f"{b}-{i}" for b in source.obs_names]
        part.write_h5ad(a.workdir / "inputs" / f"part_{i:02d}.h5ad")
    base = [str(a.workdir / "inputs" / f"part_{i:02d}.h5ad") for i in range(a.inputs)]
    subprocess.run([a.bin, "convert", *base, "--output", str(a.workdir / "base.dct"), "--overwrite"], check=True)
    subprocess.run([a.bin, "convert", *base, "--output", str(a.workdir / "base9000.dct"), "--tile-size", "9000",
                    "--overwrite"], check=True)
    n_genes = np.asarray(source.obs["n_genes"])
    cut = int(np.quantile(n_genes, 0.9))
    share = float((n_genes >= cut).mean())
    print(f"subset condition: --where n_genes={cut}: ({share:.1%} of the cells)")


if __name__ == "__main__":
    main()
