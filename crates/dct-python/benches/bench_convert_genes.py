"""Inputs with different gene lists for the converter's gene spaces, and the same inputs made equal beforehand.

    python bench_convert_genes.py WORKDIR [--source ../shared/data/pbmc3k_raw.h5ad] [--inputs 40]

Writes ``WORKDIR/different/part_NN.h5ad``: ``inputs`` copies of the source's cells, each with a seeded random 80-95%
of its genes in a seeded random order (var names and a ``gene_ids`` column as in the source), and
``WORKDIR/equal/part_NN.h5ad``: the same counts re-indexed by pandas to the union of those gene lists (genes an
input lacks as zeros, every input in the union's order), which is what a user without ``--genes`` has to do before
converting. ``docs/BENCHMARKS.md`` times ``deltacells convert different/*.h5ad --genes union`` against
``deltacells convert equal/*.h5ad`` with ``scripts/alternate.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdir", type=Path)
    p.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[4] / "shared/data/pbmc3k_raw.h5ad")
    p.add_argument("--inputs", type=int, default=40)
    a = p.parse_args()
    source = ad.read_h5ad(a.source)
    x = sp.csr_matrix(source.X)
    rng = np.random.default_rng(5)
    parts = []
    for i in range(a.inputs):
        keep = rng.permutation(source.n_vars)[: int(source.n_vars * rng.uniform(0.8, 0.95))]
        sub = sp.csr_matrix(x[:, keep].astype(np.float32))
        sub.sort_indices()  # as anndata and scanpy keep them
        part = ad.AnnData(X=sub, var=source.var.iloc[keep].copy(),
                          obs=pd.DataFrame(index=[f"{b}-{i}" for b in source.obs_names]))
        parts.append(part)
    union: list[str] = []
    seen: set[str] = set()
    for part in parts:
        for g in part.var_names:
            if g not in seen:
                seen.add(g)
                union.append(g)
    var = pd.concat([part.var for part in parts])
    var = var[~var.index.duplicated()].loc[union]
    for kind in ("different", "equal"):
        (a.workdir / kind).mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts):
        part.write_h5ad(a.workdir / "different" / f"part_{i:02d}.h5ad")
        where = pd.Index(union).get_indexer(part.var_names)
        move = sp.csr_matrix((np.ones(part.n_vars, np.float32), (np.arange(part.n_vars), where)),
                             shape=(part.n_vars, len(union)))
        moved = sp.csr_matrix(part.X @ move)
        moved.sort_indices()
        equal = ad.AnnData(X=moved, var=var.copy(), obs=part.obs.copy())
        equal.write_h5ad(a.workdir / "equal" / f"part_{i:02d}.h5ad")
    print(f"{a.inputs} inputs of {source.n_obs} cells; union of {len(union)} genes; in {a.workdir}")


if __name__ == "__main__":
    main()
