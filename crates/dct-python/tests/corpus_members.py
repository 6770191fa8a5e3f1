"""The members the corpus tests share: three datasets cut from pbmc200 with different cells, gene subsets and
orders, format versions and obs columns, and the truth they are checked against (the sources read by anndata and
re-indexed by pandas)."""

import numpy as np
from conftest import TESTDATA, require

ad = require("anndata")
pd = require("pandas")

from deltacells.convert import convert_h5ad  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"

def make_members(d):
    """Three members cut from pbmc200 into directory ``d``: different cells, gene subsets in different orders,
    versions 2, 1, 2; each converted (genes sorted by totals, so stored order differs again). Returns their roots
    and source AnnData (the ``members`` fixture of ``conftest.py``)."""
    a = ad.read_h5ad(PBMC)
    rng = np.random.default_rng(7)
    n = a.n_vars
    specs = [
        ((0, 70), rng.permutation(n)[:2000], 2),
        ((70, 130), rng.permutation(n)[:1800], 1),
        ((130, 200), np.arange(n), 2),
    ]
    roots, sources = [], []
    for i, ((lo, hi), genes, version) in enumerate(specs):
        part = a[lo:hi, genes].copy()
        part.var["gene_ids"] = ["ENSG" + g for g in part.var_names]
        # Obs that differ across members: donors of their own (d2 shared by members 0 and 2), a number column
        # stored as integers in one member and floats in another, a tissue column member 1 lacks.
        k = hi - lo
        donors = [["d1", "d2"], ["d3"], ["d2", "d4", "d5"]][i]
        part.obs["donor"] = pd.Categorical([donors[j % len(donors)] for j in rng.permutation(k)])
        counts = rng.integers(100, 3000, k)
        part.obs["n_genes"] = counts if i != 2 else counts.astype(np.float64)
        if i != 1:
            part.obs["tissue"] = pd.Categorical(rng.choice(["lung", "blood", "gut"][: 2 + i // 2], k))
        path = d / f"m{i}.h5ad"
        part.write_h5ad(path)
        root = str(d / f"m{i}")
        convert_h5ad(str(path), root, tile_size=32, level=3, n_chunks=2, log=None, format_version=version)
        roots.append(root)
        sources.append(part)
    return roots, sources


def truth(sources, genes, by_ids=False):
    """The members' counts concatenated in the vocabulary's columns, with pandas (genes a member lacks are 0)."""
    frames = []
    for s in sources:
        names = ["ENSG" + g for g in s.var_names] if by_ids else list(s.var_names)
        x = s.X.toarray() if hasattr(s.X, "toarray") else np.asarray(s.X)
        frames.append(pd.DataFrame(x, columns=names).reindex(columns=genes, fill_value=0))
    return pd.concat(frames, ignore_index=True).to_numpy(dtype=np.float32)


def obs_truth(sources):
    """The members' obs concatenated by pandas, categories as their labels (missing: None)."""
    frames = [s.obs.reset_index(drop=True).astype(object) for s in sources]
    df = pd.concat(frames, ignore_index=True)
    return df.astype(object).where(df.notna(), None)
