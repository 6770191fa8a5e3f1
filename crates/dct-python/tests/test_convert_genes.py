"""Converting inputs that list different genes into one gene space (union, intersection, a vocabulary), matched by
gene names or a gene-table column: the dataset against the inputs re-indexed with pandas, the split form, the
combined gene table and the refusals."""

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import TESTDATA, require, same

ad = require("anndata")
pd = require("pandas")

from deltacells import open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad, finalize, plan, run_part  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """pbmc200 cut into three inputs of 70, 60 and 70 cells, each with its own seeded subset (80-95%) of the
    genes in its own order, an Ensembl-like ``gene_ids`` column, and a ``note`` column that the third input
    gives differently."""
    d = tmp_path_factory.mktemp("gene_inputs")
    a = ad.read_h5ad(PBMC)
    a.var["gene_ids"] = [f"ENSG{i:08d}" for i in range(a.n_vars)]
    a.var["note"] = "first"
    rng = np.random.default_rng(7)
    parts = []
    for i, (lo, hi) in enumerate([(0, 70), (70, 130), (130, 200)]):
        keep = rng.permutation(a.n_vars)[: int(a.n_vars * rng.uniform(0.8, 0.95))]
        part = a[lo:hi, keep].copy()
        if i == 2:
            part.var["note"] = "third"
        part.write_h5ad(d / f"part_{i}.h5ad")
        parts.append(part)
    return d, parts


def expected(parts, vocabulary, key=None):
    """The inputs concatenated after re-indexing each one's columns to ``vocabulary`` with pandas."""
    blocks = []
    for p in parts:
        keys = list(p.var_names) if key is None else list(p.var[key])
        frame = pd.DataFrame(sp.csr_matrix(p.X).toarray(), columns=keys)
        blocks.append(sp.csr_matrix(frame.reindex(columns=vocabulary, fill_value=0).to_numpy()))
    return sp.vstack(blocks).tocsr()


def union_of(parts, key=None):
    seen = []
    for p in parts:
        for k in (p.var_names if key is None else p.var[key]):
            if k not in seen:
                seen.append(k)
    return seen


def check(out, parts, vocabulary, key=None):
    ds = open_dataset(out)
    keys = list(ds.var.index) if key is None else list(ds.var[key])
    assert sorted(keys) == sorted(vocabulary)
    want = expected(parts, vocabulary, key)
    columns = [vocabulary.index(k) for k in keys]
    got = ds[:].to_scipy()
    assert got.has_sorted_indices
    assert same(got, want[:, columns])
    return ds


@pytest.mark.parametrize("space", ["union", "intersection", "given"])
def test_a_gene_space_equals_the_inputs_reindexed_by_pandas(inputs, tmp_path, space):
    d, parts = inputs
    if space == "union":
        genes, vocabulary = "union", union_of(parts)
    elif space == "intersection":
        genes = "intersection"
        common = set.intersection(*(set(p.var_names) for p in parts))
        vocabulary = [g for g in parts[0].var_names if g in common]
    else:
        # Some genes of the inputs, in a shuffled order, and two no input has.
        rng = np.random.default_rng(3)
        names = union_of(parts)
        vocabulary = [names[i] for i in rng.permutation(len(names))[:1500]] + ["NOT_A_GENE_1", "NOT_A_GENE_2"]
        genes = vocabulary
    out = str(tmp_path / "out")
    m = convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, genes=genes, log=None)
    assert m.n_cells == 200 and m.n_genes == len(vocabulary)
    ds = check(out, parts, vocabulary)
    x = ds[:].to_scipy()
    totals = np.asarray(x.sum(axis=0)).ravel()
    assert (np.diff(totals) <= 0).all(), "columns sorted by decreasing totals"
    meta = json.loads((Path(out) / "manifest.json").read_text())["metadata"]["genes"]
    assert meta["space"] == ("given" if space == "given" else space)


def test_a_vocabulary_keeps_its_order_without_sorting_and_genes_match_by_a_column(inputs, tmp_path):
    d, parts = inputs
    vocabulary = union_of(parts, "gene_ids")[::-1]
    out = str(tmp_path / "out")
    convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, genes=vocabulary, gene_key="gene_ids",
                 sort_genes=False, log=None)
    ds = check(out, parts, vocabulary, key="gene_ids")
    assert list(ds.var["gene_ids"]) == vocabulary, "the vocabulary's order, unsorted"
    # Names come from the first input that has each gene.
    name_of = {}
    for p in parts:
        for name, key in zip(p.var_names, p.var["gene_ids"]):
            name_of.setdefault(key, name)
    assert ds.var_names == [name_of[k] for k in vocabulary]


def test_the_gene_table_keeps_the_first_input_s_values_and_counts_disagreements(inputs, tmp_path):
    d, parts = inputs
    out = str(tmp_path / "out")
    convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, genes="union", log=None)
    ds = open_dataset(out)
    first_of = {}
    for i, p in enumerate(parts):
        for g in p.var_names:
            first_of.setdefault(g, i)
    assert list(ds.var["note"]) == ["third" if first_of[g] == 2 else "first" for g in ds.var.index]
    # Genes the third input shares with an earlier one are described differently there.
    shared = sum(1 for g in parts[2].var_names if first_of[g] < 2)
    meta = json.loads((Path(out) / "manifest.json").read_text())["metadata"]["genes"]
    assert meta["var_genes_described_differently"] == shared > 0


def test_the_split_form_writes_the_same_tiles(inputs, tmp_path):
    d, _ = inputs
    one = str(tmp_path / "one")
    convert_h5ad(str(d / "*.h5ad"), one, tile_size=40, level=3, genes="union", gene_key="gene_ids", log=None)
    out, plan_path = str(tmp_path / "split"), str(tmp_path / "plan.json")
    n_cells, n_genes, n_tiles = plan(str(d / "*.h5ad"), out, plan_path, tile_size=40, level=3, genes="union",
                                     gene_key="gene_ids")
    assert (n_cells, n_tiles) == (200, 5)
    for i in range(2):
        run_part(plan_path, i, 2)
    finalize(plan_path)
    tiles = lambda root: [p.read_bytes() for p in sorted(Path(root, "tiles").glob("*.dct"))]  # noqa: E731
    assert tiles(out) == tiles(one)
    assert (Path(out) / "var.parquet").read_bytes() == (Path(one) / "var.parquet").read_bytes()


def test_refusals_name_the_input_the_gene_and_the_option(inputs, tmp_path):
    d, parts = inputs
    with pytest.raises(Exception, match="--genes"):
        convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "a"), level=3, log=None)
    dup = parts[0].copy()
    dup.var["gene_ids"] = ["SAME"] * dup.n_vars
    dup.write_h5ad(tmp_path / "dup.h5ad")
    with pytest.raises(Exception, match=r"dup\.h5ad.*SAME"):
        convert_h5ad(str(tmp_path / "dup.h5ad"), str(tmp_path / "b"), level=3, genes="union", gene_key="gene_ids",
                     log=None)
    with pytest.raises(Exception, match="no column"):
        convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "c"), level=3, genes="union", gene_key="nope", log=None)
    with pytest.raises(ValueError, match="give genes"):
        convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "d"), level=3, gene_key="gene_ids", log=None)


def test_10x_hdf5_and_matrix_market_inputs_match_by_their_feature_ids(tmp_path):
    """The 10x HDF5 and Matrix Market copies of pbmc200 (feature IDs) and an h5ad of its cells with a subset of its
    genes in another order (matched by its ``gene_ids`` column), as one union by ID."""
    a = ad.read_h5ad(PBMC)
    keep = np.random.default_rng(11).permutation(a.n_vars)[:2000]
    part = a[:50, keep].copy()
    part.write_h5ad(tmp_path / "part.h5ad")
    tenx, mtx = PBMC.parent / "pbmc200_10x.h5", PBMC.parent / "mtx"
    out = str(tmp_path / "out")
    convert_h5ad([str(tenx), str(mtx), str(tmp_path / "part.h5ad")], out, sort_files=False, tile_size=64, level=3,
                 genes="union", gene_key="gene_ids", log=None)
    vocabulary = list(a.var["gene_ids"])
    # The 10x copies hold pbmc200's counts: the same matrix, named by the same IDs.
    check(out, [a, a, part], vocabulary, key="gene_ids")


def test_the_cli_takes_a_vocabulary_file(inputs, tmp_path):
    import subprocess
    import sys

    d, parts = inputs
    vocabulary = union_of(parts)[:1000]
    (tmp_path / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    out = str(tmp_path / "out")
    r = subprocess.run([sys.executable, "-m", "deltacells", "convert", str(d / "part_0.h5ad"), str(d / "part_1.h5ad"),
                        str(d / "part_2.h5ad"), "--output", out, "--level", "3", "--tile-size", "64",
                        "--genes", str(tmp_path / "vocab.txt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    check(out, parts, vocabulary)
    r = subprocess.run([sys.executable, "-m", "deltacells", "convert", str(d / "part_0.h5ad"), str(d / "part_1.h5ad"),
                        "--output", str(tmp_path / "refused"), "--level", "3"], capture_output=True, text=True)
    assert r.returncode != 0 and "--genes" in r.stderr


def test_a_union_writes_the_tiles_of_the_inputs_made_equal_beforehand(inputs, tmp_path):
    """What a user without gene spaces does (every input re-indexed to the union by pandas, then converted) gives
    the same tiles, byte for byte, as converting the inputs as they are with genes="union"."""
    d, parts = inputs
    vocabulary = union_of(parts)
    equal = tmp_path / "equal"
    equal.mkdir()
    for i, p in enumerate(parts):
        frame = pd.DataFrame(sp.csr_matrix(p.X).toarray(), columns=list(p.var_names))
        x = sp.csr_matrix(frame.reindex(columns=vocabulary, fill_value=0).to_numpy(np.float32))
        ad.AnnData(X=x, obs=p.obs.copy(), var=pd.DataFrame(index=vocabulary)).write_h5ad(equal / f"part_{i}.h5ad")
    convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "union"), tile_size=64, level=3, genes="union", log=None)
    convert_h5ad(str(equal / "*.h5ad"), str(tmp_path / "made_equal"), tile_size=64, level=3, log=None)
    tiles = lambda root: [p.read_bytes() for p in sorted(Path(root, "tiles").glob("*.dct"))]  # noqa: E731
    assert tiles(tmp_path / "union") == tiles(tmp_path / "made_equal")
    assert open_dataset(str(tmp_path / "union")).var_names == open_dataset(str(tmp_path / "made_equal")).var_names
