"""The Rust converter from Python: rows and obs against the inputs read by anndata, byte-identical datasets from
convert_h5ad, the CLI, DatasetWriter and the split form (also on a Dask cluster), version-1 output, errors."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import TESTDATA, require, run_module, same

ad = require("anndata")
pd = require("pandas")

import deltacells  # noqa: E402
from deltacells import DatasetWriter, open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad, finalize, plan, resolve_files, run_part, scan_part  # noqa: E402
from deltacells.obs import ObsSchema  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"
NULLABLE = TESTDATA / "inputs" / "nullable_obs.h5ad"
LAYOUTS = TESTDATA / "inputs" / "layouts.h5ad"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """pbmc200 split into three h5ad files of 70, 60 and 70 cells (as anndata writes them)."""
    d = tmp_path_factory.mktemp("shards")
    a = ad.read_h5ad(PBMC)
    for i, (lo, hi) in enumerate([(0, 70), (70, 130), (130, 200)]):
        a[lo:hi].copy().write_h5ad(d / f"part_{i}.h5ad")
    return d, a


def tile_bytes(root):
    return [p.read_bytes() for p in sorted(Path(root, "tiles").glob("*.dct"))]


def test_rows_obs_and_var_match_anndata(shards, tmp_path):
    d, a = shards
    out = str(tmp_path / "out")
    logged = []
    m = convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, n_chunks=4, log=logged.append)
    assert logged and "done" in logged[-1]
    ds = open_dataset(out, cache_dir=str(tmp_path / "cache"))
    assert (m.n_cells, m.n_genes, m.tile_cells) == (200, 2500, [64, 64, 64, 8]) and m.version == 2
    x = sp.csr_matrix(a.X)
    assert same(ds[:].to_scipy(), x[:, ds.gene_order])
    assert same(ds[:].to_scipy()[:, np.argsort(ds.gene_order)], x), "the source order, as get_batch says"
    totals = np.asarray(x.sum(axis=0)).ravel()[ds.gene_order]
    assert (np.diff(totals) <= 0).all(), "genes ordered by decreasing totals"
    assert ds.var_names == list(a.var_names[ds.gene_order])
    assert list(ds.var.index) == list(a.var_names[ds.gene_order])
    obs = ds.obs
    assert obs.columns == list(a.obs.columns) + ["obs_names"], "the source columns, then obs_names last"
    df = obs.to_pandas()
    assert list(df["obs_names"]) == list(a.obs_names)
    for c in a.obs.columns:
        assert [str(v) for v in df[c]] == [str(v) for v in a.obs[c]], c


def test_schema_and_fingerprint_follow_the_original_column_order(tmp_path):
    out = str(tmp_path / "o")
    convert_h5ad(str(NULLABLE), out, tile_size=16, level=3, log=None)
    a = ad.read_h5ad(NULLABLE)
    schema = json.loads((Path(out) / "obs" / "schema.json").read_text())
    assert [c["name"] for c in schema["columns"]] == list(a.obs.columns) + ["obs_names"]
    # The text is what ObsSchema (the original's format) writes for the same columns.
    schema_text = (Path(out) / "obs" / "schema.json").read_text()
    assert ObsSchema.from_json(schema_text).to_json() == schema_text


def test_cli_python_writer_and_convert_h5ad_give_the_same_tiles(shards, tmp_path):
    d, a = shards
    via_py = str(tmp_path / "py")
    m = convert_h5ad(str(d / "*.h5ad"), via_py, tile_size=50, level=5, n_chunks=3, log=None)
    via_cli = str(tmp_path / "cli")
    r = run_module(
        "convert", str(d / "*.h5ad"), "--output", via_cli, "--tile-size", "50", "--level", "5", "--chunks", "3"
    )
    assert r.returncode == 0, r.stderr
    assert tile_bytes(via_py) == tile_bytes(via_cli)
    for side in ("gene_order.npy", "var_names.txt", "var.parquet", "obs/schema.json", "obs/obs_0000.parquet"):
        assert (Path(via_py) / side).read_bytes() == (Path(via_cli) / side).read_bytes(), side
    # DatasetWriter fed the same cells, gene order and obs writes the same tiles and obs shards.
    order = open_dataset(via_py).gene_order
    obs = a.obs.copy()
    obs["obs_names"] = list(a.obs_names)
    schema = ObsSchema.from_json((Path(via_cli) / "obs" / "schema.json").read_text())
    via_writer = str(tmp_path / "w")
    x = sp.csr_matrix(a.X)
    with DatasetWriter(
        via_writer, n_genes=2500, tile_size=50, gene_order=order, level=5, n_chunks=3, obs_schema=schema,
        obs_compression_level=5,  # the converter compresses obs at the tiles' level
    ) as w:
        for lo in range(0, 200, 50):
            w.add_tile(x[lo : lo + 50], obs=obs.iloc[lo : lo + 50])
    assert tile_bytes(via_writer) == tile_bytes(via_cli)
    shard = "obs/obs_0000.parquet"
    assert (Path(via_writer) / shard).read_bytes() == (Path(via_cli) / shard).read_bytes()
    mw = deltacells.Manifest.from_json((Path(via_writer) / "manifest.json").read_text())
    assert mw.obs_fingerprint == m.obs_fingerprint and mw.tile_bytes == m.tile_bytes


def test_split_form_gives_the_same_tiles(shards, tmp_path):
    d, _ = shards
    one = str(tmp_path / "one")
    convert_h5ad(str(d / "*.h5ad"), one, tile_size=40, level=3, log=None)
    out, plan_path = str(tmp_path / "split"), str(tmp_path / "plan.json")
    for i in range(2):
        assert scan_part(str(d / "*.h5ad"), plan_path, i, 2, tile_size=40, level=3)[0] >= 1
    assert plan(str(d / "*.h5ad"), out, plan_path, tile_size=40, level=3) == (200, 2500, 5)
    for i in range(3):
        written, skipped = run_part(plan_path, i, 3)
        assert skipped == 0
    assert run_part(plan_path, 0, 3) == (0, 1), "a part run again keeps its complete tiles"
    for part, parts, says in ((-1, 3, "part = -1: must be at least 0"), (3, 3, "part = 3: must be at most 2"),
                              (0, 0, "parts = 0: must be at least 1")):
        with pytest.raises(ValueError, match=says):
            run_part(plan_path, part, parts)
    m = finalize(plan_path)
    assert m.n_tiles == 5 and tile_bytes(out) == tile_bytes(one)
    assert not (Path(out) / "manifest.json").read_text() == ""


def test_a_new_plan_with_overwrite_clears_the_output_another_plan_holds(shards, tmp_path):
    d, _ = shards
    out, first, second = str(tmp_path / "o"), str(tmp_path / "p1.json"), str(tmp_path / "p2.json")
    plan(str(d / "*.h5ad"), out, first, tile_size=40, level=3)
    run_part(first, 0, 1)
    finalize(first)
    plan(str(d / "*.h5ad"), out, second, tile_size=50, level=3)
    with pytest.raises(FileExistsError, match="already holds a dataset"):
        run_part(second, 0, 1)
    plan(str(d / "*.h5ad"), out, second, tile_size=50, level=3, overwrite=True)
    assert not (Path(out) / "manifest.json").exists()
    assert run_part(second, 0, 1) == (4, 0)
    m = finalize(second)
    one = str(tmp_path / "one")
    convert_h5ad(str(d / "*.h5ad"), one, tile_size=50, level=3, log=None)
    assert m.tile_size == 50 and tile_bytes(out) == tile_bytes(one)


def _part(plan_path, i, n):
    from deltacells.convert import run_part as rp

    return rp(plan_path, i, n)


def test_parts_as_dask_tasks_on_a_local_cluster(shards, tmp_path):
    distributed = require("distributed")
    d, _ = shards
    one = str(tmp_path / "one")
    convert_h5ad(str(d / "*.h5ad"), one, tile_size=30, level=3, log=None)
    out, plan_path = str(tmp_path / "dask"), str(tmp_path / "plan.json")
    plan(str(d / "*.h5ad"), out, plan_path, tile_size=30, level=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            futures = [client.submit(_part, plan_path, i, 4, pure=False) for i in range(4)]
            results = client.gather(futures)
    assert sum(w for w, _ in results) == 7
    finalize(plan_path)
    assert tile_bytes(out) == tile_bytes(one)
    ds = open_dataset(out)
    assert same(ds[:].to_scipy(), open_dataset(one)[:].to_scipy())


def test_version_1_output_and_its_refusal(shards, tmp_path):
    d, _ = shards
    out = str(tmp_path / "v1")
    m = convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, format_version=1, log=None)
    raw = json.loads((Path(out) / "manifest.json").read_text())
    assert m.version == 1 and raw["version"] == 1 and "obs_shard_footer_crc32" not in raw
    assert all(t[8] == 1 for t in tile_bytes(out))
    ds = open_dataset(out)
    assert same(ds[:].to_scipy(), open_dataset(str(_v2(d, tmp_path)))[:].to_scipy())
    # layouts.h5ad holds a count of 70000 in cell 0: version 1 cannot store it.
    with pytest.raises(ValueError, match=r"cell \d+, gene \d+: count \d+ is above 65535"):
        convert_h5ad(str(LAYOUTS), str(tmp_path / "bad"), tile_size=16, level=3, format_version=1, log=None)
    assert not (tmp_path / "bad" / "manifest.json").exists()


def _v2(d, tmp_path):
    out = tmp_path / "v2"
    convert_h5ad(str(d / "*.h5ad"), str(out), tile_size=64, level=3, log=None)
    return out


def test_errors(shards, tmp_path):
    d, _ = shards
    with pytest.raises(FileNotFoundError):
        convert_h5ad(str(tmp_path / "nope*.h5ad"), str(tmp_path / "o"), log=None)
    with pytest.raises(FileNotFoundError):
        resolve_files([str(tmp_path / "missing.h5ad")])
    out = str(tmp_path / "done")
    convert_h5ad(str(d / "part_0.h5ad"), out, tile_size=32, level=3, log=None)
    with pytest.raises(FileExistsError):
        convert_h5ad(str(d / "part_0.h5ad"), out, tile_size=32, level=3, log=None)
    m = convert_h5ad(str(d / "part_1.h5ad"), out, tile_size=25, level=3, log=None, overwrite=True)
    assert m.tile_size == 25 and m.n_cells == 60
    with pytest.raises(ValueError, match="sort_genes_max_files"):
        convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "z"), sort_genes_max_files=0, log=None)
    assert resolve_files([str(d / "part_1.h5ad"), str(d / "part_0.h5ad")], sort=False)[0].endswith("part_1.h5ad")


def test_var_false_writes_no_gene_table(shards, tmp_path):
    """As the original's ``var=False``: no ``var.parquet``; the gene names and the tiles are those of the default;
    the same through the split form and the CLI's ``--no-var``."""
    d, a = shards
    with_var, without = str(tmp_path / "with"), str(tmp_path / "without")
    convert_h5ad(str(d / "*.h5ad"), with_var, tile_size=64, level=3, log=None)
    m = convert_h5ad(str(d / "*.h5ad"), without, tile_size=64, level=3, log=None, var=False)
    assert os.path.exists(os.path.join(with_var, "var.parquet"))
    assert not os.path.exists(os.path.join(without, "var.parquet"))
    ds = open_dataset(without)
    assert ds.var is None and not m.has_var_table
    assert ds.var_names == list(a.var_names[ds.gene_order]) and tile_bytes(without) == tile_bytes(with_var)
    split, plan_path = str(tmp_path / "split"), str(tmp_path / "plan.json")
    plan(str(d / "*.h5ad"), split, plan_path, tile_size=64, level=3, var=False)
    run_part(plan_path, 0, 1)
    finalize(plan_path)
    assert not os.path.exists(os.path.join(split, "var.parquet")) and tile_bytes(split) == tile_bytes(with_var)
    cli = str(tmp_path / "cli")
    r = run_module("convert", str(d / "*.h5ad"), "--output", cli, "--tile-size", "64", "--level", "3", "--no-var")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(cli, "var.parquet")) and tile_bytes(cli) == tile_bytes(with_var)


@pytest.mark.parametrize(
    ("options", "sorted_over"),
    [({}, 3), ({"sort_genes_max_files": 2}, 2), ({"sort_genes_max_files": 10}, 3), ({"sort_genes": False}, 0)],
)
def test_manifest_metadata_carries_the_original_s_conversion_keys(shards, tmp_path, options, sorted_over):
    """Scripts written against the original read its conversion settings from ``manifest.metadata``; the count of
    files the gene order was summed over is checked against the order itself."""
    d, a = shards
    out = str(tmp_path / "out")
    m = convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, n_chunks=2, level=3, log=None, **options)
    md = json.loads(Path(out, "manifest.json").read_text())["metadata"]
    assert md == m.metadata
    assert md["sort_genes"] is (sorted_over > 0) and md["sort_genes_n_files"] == sorted_over
    assert (md["n_files"], md["tile_size"], md["n_chunks"], md["level"]) == (3, 64, 2, 3)
    # The gene order is by decreasing total over the files it was summed over (ties by source index).
    x = a.X.tocsr()
    parts = [(0, 70), (70, 130), (130, 200)]
    picked = {3: [0, 1, 2], 2: [0, 2], 0: []}[sorted_over]
    totals = sum((np.asarray(x[lo:hi].sum(axis=0)).ravel() for lo, hi in (parts[i] for i in picked)),
                 np.zeros(x.shape[1]))
    order = open_dataset(out).gene_order
    if sorted_over:
        assert list(order) == sorted(range(x.shape[1]), key=lambda g: (-totals[g], g))
    else:
        assert order is None or list(order) == list(range(x.shape[1]))


@pytest.mark.parametrize("sort", [True, False])
def test_the_cli_and_python_resolve_inputs_alike(shards, tmp_path, sort):
    """One rule for both: ``**`` at any depth, hidden names left out, a path given twice read once, natural order
    (or the order given); the inputs a conversion read are those its manifest lists."""
    import shutil

    d, _ = shards
    src = tmp_path / "in"
    (src / "b" / "deep").mkdir(parents=True)
    for part, dest in [(0, "b/part_10.h5ad"), (1, "b/part_2.h5ad"), (2, "b/deep/part_1.h5ad"), (0, ".old.h5ad")]:
        shutil.copy(d / f"part_{part}.h5ad", src / dest)
    patterns = [str(src / "b" / "part_2.h5ad"), str(src / "**" / "*.h5ad")]
    got = resolve_files(patterns, sort=sort)
    names = [os.path.relpath(p, src) for p in got]
    if sort:
        assert names == ["b/deep/part_1.h5ad", "b/part_2.h5ad", "b/part_10.h5ad"]
    else:
        assert names == ["b/part_2.h5ad", "b/deep/part_1.h5ad", "b/part_10.h5ad"]
    via_py, via_cli = str(tmp_path / "py"), str(tmp_path / "cli")
    convert_h5ad(patterns, via_py, tile_size=64, level=1, log=None, sort_files=sort)
    r = run_module("convert", *patterns, "--output", via_cli, "--tile-size", "64", "--level", "1",
                   *([] if sort else ["--no-sort-files"]))
    assert r.returncode == 0, r.stderr
    for out in (via_py, via_cli):
        assert json.loads(Path(out, "manifest.json").read_text())["metadata"]["inputs"] == got
    assert tile_bytes(via_py) == tile_bytes(via_cli)
    for bad in (str(src / "nothing*.h5ad"), str(src / "part_3.h5ad")):
        with pytest.raises(FileNotFoundError, match="nothing|does not exist"):
            resolve_files([patterns[0], bad])
        r = run_module("convert", patterns[0], bad, "--output", str(tmp_path / "x"))
        assert r.returncode != 0 and os.path.basename(bad) in r.stderr


def test_an_index_stored_as_a_nullable_string_array_is_read(tmp_path):
    """anndata 0.13 with pandas 3 stores an index of pandas' ``string`` dtype as a ``nullable-string-array`` group
    (values and mask): the converter reads such obs and var indexes as anndata does."""
    import shutil

    h5py = require("h5py")
    path = tmp_path / "nullable_index.h5ad"
    shutil.copy(PBMC, path)
    with h5py.File(path, "r+") as f:
        for frame in ("obs", "var"):
            name = f[frame].attrs["_index"]
            values = f[frame][name][()]
            del f[frame][name]
            g = f[frame].create_group(name)
            g.attrs.update({"encoding-type": "nullable-string-array", "encoding-version": "0.1.0", "na-value": "NaN"})
            v = g.create_dataset("values", data=values, dtype=h5py.string_dtype())
            v.attrs.update({"encoding-type": "string-array", "encoding-version": "0.2.0"})
            m = g.create_dataset("mask", data=np.zeros(len(values), dtype=bool))
            m.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
    a = ad.read_h5ad(path)
    assert list(a.var_names) == list(ad.read_h5ad(PBMC).var_names), "anndata reads the rewritten file"
    out = str(tmp_path / "out")
    convert_h5ad(str(path), out, level=3, sort_genes=False, log=None)
    ds = open_dataset(out)
    assert ds.var_names == list(a.var_names)
    assert list(ds.obs.to_pandas()["obs_names"]) == list(a.obs_names)
    assert same(ds[:].to_scipy(), sp.csr_matrix(a.X))


def test_nullable_unsigned_obs_keep_values_past_the_signed_range(tmp_path):
    """pandas' UInt64 holds values up to 2**64 - 1: converted, they read back as anndata reads them (not capped at
    2**63 - 1), missing values missing; UInt8 stays unsigned too."""
    obs = pd.DataFrame({
        "big": pd.array([2**63 + 5, None, 2**64 - 1, 7], dtype="UInt64"),
        "small": pd.array([255, 0, None, 1], dtype="UInt8"),
    }, index=list("abcd"))
    src = tmp_path / "u.h5ad"
    ad.AnnData(X=np.ones((4, 2), np.float32), obs=obs).write_h5ad(src)
    want = ad.read_h5ad(src).obs
    out = str(tmp_path / "out")
    convert_h5ad(str(src), out, log=None)
    ds = open_dataset(out)
    assert [ds.obs.schema[c].arrow_type for c in ("big", "small")] == ["uint64", "uint8"]
    got = ds.obs.to_pandas()
    for c in ("big", "small"):
        assert _arrow_column(out, c) == [None if pd.isna(v) else int(v) for v in want[c]], c
        assert got[c].isna().tolist() == want[c].isna().tolist(), c


def test_categories_of_numbers_and_booleans_are_named_alike_however_the_dataset_was_written(tmp_path):
    """Converted from an h5ad or written from pandas, a categorical of booleans or numbers gets the categories
    ``str()`` gives its values, so a corpus over both has one vocabulary."""
    obs = pd.DataFrame({
        "flag": pd.Categorical([True, False, True]),
        "dose": pd.Categorical([1.0, 2.5, 1.0]),
        "n": pd.Categorical([3, 1, 3]),
    }, index=list("abc"))
    src = tmp_path / "c.h5ad"
    ad.AnnData(X=np.ones((3, 2), np.float32), obs=obs).write_h5ad(src)
    converted = str(tmp_path / "converted")
    convert_h5ad(str(src), converted, log=None)
    written = str(tmp_path / "written")
    back = ad.read_h5ad(src).obs
    schema = deltacells.obs.ObsSchema.infer(back)
    genes = list(open_dataset(converted).var_names)
    with DatasetWriter(written, n_genes=2, tile_size=8, obs_schema=schema, var_names=genes) as w:
        w.add_tile(sp.csr_matrix(np.ones((3, 2), np.float32)), obs=back)
    for c in ("flag", "dose", "n"):
        want = [str(v) for v in back[c].cat.categories]
        assert open_dataset(converted).obs.schema[c].categories == want, c
        assert open_dataset(written).obs.schema[c].categories == want, c
    corpus = deltacells.open_corpus([converted, written])
    assert sorted(corpus.obs.take_pandas(range(6), "flag")["flag"].cat.categories) == ["False", "True"]


def _arrow_column(root, column):
    """A column of a dataset's obs as the parquet shards hold it (read by pyarrow, not by deltacells)."""
    import glob

    import pyarrow.parquet as pq

    return [v for f in sorted(glob.glob(os.path.join(root, "obs", "*.parquet")))
            for v in pq.read_table(f, columns=[column]).column(column).to_pylist()]


def test_obs_options_threads_and_workers_of_convert_h5ad(shards, tmp_path):
    """Each obs option does what its documentation says, against anndata's obs; threads and workers change nothing
    in the tiles."""
    d, a = shards
    base = str(tmp_path / "base")
    convert_h5ad(str(d / "*.h5ad"), base, tile_size=64, level=3, n_chunks=4, log=None)
    out = str(tmp_path / "out")
    m = convert_h5ad(str(d / "*.h5ad"), out, tile_size=64, level=3, n_chunks=4, log=None, obs_names=False,
                     obs_exclude=["qc_pass"], max_categories=3, obs_tiles_per_file=1, threads=1, workers=2)
    assert tile_bytes(out) == tile_bytes(base), "threads and workers change no tile"
    ds = open_dataset(out, cache_dir=str(tmp_path / "cache"))
    obs = ds.obs
    assert obs.columns == ["barcode", "depth_bin"], "qc_pass excluded, no obs_names"
    assert a.obs["depth_bin"].nunique() > 3
    assert obs.kind("depth_bin") == "string", "a category column of more than max_categories values: strings"
    assert list(obs.to_pandas()["depth_bin"]) == [str(v) for v in a.obs["depth_bin"]]
    assert len(list(Path(out, "obs").glob("*.parquet"))) == m.n_tiles, "one obs file per tile"
    with pytest.raises(ValueError, match="workers"):
        convert_h5ad(str(d / "*.h5ad"), str(tmp_path / "bad"), workers=0, log=None)
