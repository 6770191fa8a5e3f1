"""`deltacells subset`: a new dataset of some cells (by index or obs conditions) and genes of a dataset, checked
against the source h5ad read by anndata; its obs, gene names and gene table; the refusals."""

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import TESTDATA, dataset_files, kill_trials, require, run_module, same, timed_run

ad = require("anndata")
pd = require("pandas")

from deltacells import open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """pbmc200 with a numeric obs column (each cell's genes with a count) as a dataset of 64-cell tiles."""
    d = tmp_path_factory.mktemp("subset_source")
    a = ad.read_h5ad(PBMC)
    a.obs["n_genes"] = np.diff(sp.csr_matrix(a.X).indptr).astype(np.int64)
    a.write_h5ad(d / "pbmc.h5ad")
    convert_h5ad(str(d / "pbmc.h5ad"), str(d / "ds"), tile_size=64, level=3, log=None)
    return str(d / "ds"), a


def subset(src, out, *args):
    r = run_module("subset", src, "--output", str(out), "--level", "3", *args)
    assert r.returncode == 0, r.stderr
    return open_dataset(str(out))


def check(ds, a, cells, genes=None):
    """The subset holds ``a``'s rows ``cells`` (sorted, once each) and columns ``genes`` (names; default all) in the
    source's stored column order, with their obs."""
    cells = sorted(set(cells))
    assert ds.n_cells == len(cells)
    names = ds.var_names
    if genes is not None:
        assert sorted(names) == sorted(genes)
    want = sp.csr_matrix(a.X)[cells][:, [a.var_names.get_loc(g) for g in names]]
    assert same(ds[:].to_scipy(), want)
    obs = ds.obs.to_pandas()
    for c in a.obs.columns:
        assert [str(v) for v in obs[c]] == [str(v) for v in a.obs[c].iloc[cells]], c
    assert list(obs["obs_names"]) == list(a.obs_names[cells])
    assert list(ds.var.index) == names
    assert list(ds.var["gene_ids"]) == list(a.var.loc[names, "gene_ids"])


def test_cells_by_index(source, tmp_path):
    src, a = source
    ds = subset(src, tmp_path / "out", "--cells", "5:70,150,3,150")
    check(ds, a, [3, *range(5, 70), 150])
    meta = json.loads((tmp_path / "out" / "manifest.json").read_text())["metadata"]["subset"]
    assert (meta["source"], meta["cells"]) == (src, 67)


def test_cells_by_obs_conditions_and_a_gene_list(source, tmp_path):
    src, a = source
    genes = list(a.var_names[::7])
    (tmp_path / "genes.txt").write_text("\n".join(genes) + "\n")
    ds = subset(src, tmp_path / "out", "--where", "depth_bin=q1,q3", "--where", "qc_pass=true",
                "--where", "n_genes=300:", "--genes", str(tmp_path / "genes.txt"), "--tile-size", "16")
    mask = a.obs["depth_bin"].isin(["q1", "q3"]) & a.obs["qc_pass"] & (a.obs["n_genes"] >= 300)
    assert 0 < mask.sum() < a.n_obs
    check(ds, a, list(np.flatnonzero(mask.to_numpy())), genes)
    # Category codes keep the source's vocabulary.
    assert ds.obs.categories("depth_bin") == open_dataset(src).obs.categories("depth_bin")


def test_genes_by_a_gene_table_column(source, tmp_path):
    src, a = source
    ids = list(a.var["gene_ids"][:40])
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    ds = subset(src, tmp_path / "out", "--cells", "0:10", "--genes", str(tmp_path / "ids.txt"),
                "--gene-key", "gene_ids")
    check(ds, a, range(10), list(a.var_names[:40]))


def test_refusals(source, tmp_path):
    src, _ = source
    for args, message in [
        (["--where", "nope=1"], "no column"),
        (["--where", "n_genes=lots"], "not a number"),
        (["--where", "depth_bin=q9"], "empty"),
        (["--cells", "500"], "500"),
    ]:
        r = run_module("subset", src, "--output", str(tmp_path / "x"), *args)
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)
        assert not (tmp_path / "x" / "manifest.json").exists()
    (tmp_path / "g.txt").write_text("NOT_A_GENE\n")
    r = run_module("subset", src, "--output", str(tmp_path / "y"), "--genes", str(tmp_path / "g.txt"))
    assert r.returncode != 0 and "NOT_A_GENE" in r.stderr
    subset(src, tmp_path / "z", "--cells", "0:5")
    before = dataset_files(tmp_path / "z")
    r = run_module("subset", src, "--output", str(tmp_path / "z"), "--level", "3", "--cells", "0:5", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["already_done"], "the same subset again is left as it is"
    assert dataset_files(tmp_path / "z") == before
    for other in (["--level", "3", "--cells", "0:6"], ["--level", "4", "--cells", "0:5"],
                  ["--level", "3", "--cells", "0:5", "--tile-size", "2"]):
        r = run_module("subset", src, "--output", str(tmp_path / "z"), *other)
        assert r.returncode != 0 and "overwrite" in r.stderr, f"another subset is not written over it: {other}"
    subset(src, tmp_path / "z", "--cells", "0:6", "--overwrite")


def test_the_python_function_writes_what_the_command_writes(source, tmp_path):
    from deltacells.convert import subset as subset_fn

    src, a = source
    genes = list(a.var_names[:300])
    (tmp_path / "genes.txt").write_text("\n".join(genes))
    by_cli = subset(src, tmp_path / "cli", "--cells", "0:150", "--where", "depth_bin=q2,q5", "--where",
                    "n_genes=:900", "--genes", str(tmp_path / "genes.txt"))
    m = subset_fn(src, tmp_path / "py", cells=range(150), where={"depth_bin": ["q2", "q5"], "n_genes": (None, 900)},
                  genes=genes, level=3)
    assert m.n_cells == by_cli.n_cells > 0
    tiles = lambda root: [p.read_bytes() for p in sorted(Path(root, "tiles").glob("*.dct"))]  # noqa: E731
    assert tiles(tmp_path / "py") == tiles(tmp_path / "cli")
    mask = a.obs["depth_bin"].isin(["q2", "q5"]) & (a.obs["n_genes"] <= 900)
    check(open_dataset(str(tmp_path / "py")), a, [c for c in np.flatnonzero(mask.to_numpy()) if c < 150], genes)
    with pytest.raises(ValueError, match="no value"):
        subset_fn(src, tmp_path / "none", where={"depth_bin": []})
    for bad, says in (([3, -1], r"cell -1 \(position 1 of the request\) is out of range"),
                      ([a.n_obs], f"cell {a.n_obs} .* is out of range")):
        with pytest.raises(ValueError, match=says):
            subset_fn(src, tmp_path / "bad", cells=bad)
    with pytest.raises(TypeError, match="cells must be an integer"):
        subset_fn(src, tmp_path / "bad", cells=["x"])
    assert not (tmp_path / "bad" / "manifest.json").exists()


def test_subsets_killed_at_random_moments_are_completed_by_running_them_again(tmp_path):
    """SIGKILL at seeded random moments of a subset by an obs condition (half of 4,000 cells, cut anew at level 19):
    the output is never a dataset with a manifest that is not the whole subset, and running the same command again
    completes it, file for file equal to a subset never interrupted."""
    a = ad.read_h5ad(PBMC)
    a.X = sp.csr_matrix(a.X)
    big = ad.concat([a] * 20, index_unique="-")
    big.obs["site"] = pd.Categorical(["lung", "blood"] * 2000)
    big.write_h5ad(tmp_path / "big.h5ad")
    convert_h5ad(str(tmp_path / "big.h5ad"), str(tmp_path / "src"), tile_size=50, level=3, log=None)
    args = ["subset", str(tmp_path / "src"), "--where", "site=lung", "--level", "19"]
    duration = timed_run(*args, "--output", str(tmp_path / "clean"))
    want = dataset_files(tmp_path / "clean")
    lung = open_dataset(str(tmp_path / "clean"))
    assert lung.n_cells == 2000 and list(lung.obs.to_pandas()["obs_names"]) == list(big.obs_names[::2])
    out = tmp_path / "out"
    left = kill_trials([*args, "--output", str(out)], out, want, seed=20261206, duration=duration)
    assert "partial" in left, left


def test_genes_stored_in_the_listed_order_with_missing_ones_left_out(source, tmp_path):
    from deltacells.convert import subset as subset_fn

    src, a = source
    listed = list(np.random.default_rng(3).permutation(a.var_names)[:250])
    listed.insert(7, "NOT_A_GENE")
    (tmp_path / "genes.txt").write_text("\n".join(listed))
    by_cli = subset(src, tmp_path / "cli", "--cells", "20:120", "--genes", str(tmp_path / "genes.txt"),
                    "--listed-order", "--skip-missing-genes")
    kept = [g for g in listed if g != "NOT_A_GENE"]
    assert by_cli.var_names == kept, "stored in the order listed"
    check(by_cli, a, range(20, 120), kept)
    m = subset_fn(src, tmp_path / "py", cells=range(20, 120), genes=listed, level=3, listed_gene_order=True,
                  skip_missing_genes=True)
    assert m.n_genes == len(kept)
    tiles = lambda root: [p.read_bytes() for p in sorted(Path(root, "tiles").glob("*.dct"))]  # noqa: E731
    assert tiles(tmp_path / "py") == tiles(tmp_path / "cli")
    # Without --listed-order the same genes come in the source's column order.
    plain = subset(src, tmp_path / "plain", "--cells", "20:120", "--genes", str(tmp_path / "genes.txt"),
                   "--skip-missing-genes")
    assert sorted(plain.var_names) == sorted(kept) and plain.var_names != kept
