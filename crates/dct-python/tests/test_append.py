"""Appending cells to a dataset (`deltacells append`, `deltacells.append`): the result against the inputs
concatenated by anndata and re-indexed by pandas, full tiles left untouched, obs growing (new categories at the end,
new columns missing for the old cells), the records that make an append idempotent, the refusals, a reader opened
before the append, and appends killed at random moments completed by running them again."""

import hashlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import TESTDATA, require, run_module, s3_or_skip, same

ad = require("anndata")
pd = require("pandas")

import deltacells  # noqa: E402
from deltacells import open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"
TILE = 50


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(ds: Path) -> dict[str, str]:
    """Every file of a dataset and its SHA-256."""
    return {str(p.relative_to(ds)): digest(p) for p in sorted(ds.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """pbmc200 cut in two: the first 130 cells (a dataset of 50-cell tiles, the last holding 30) and the other 70
    as an input whose genes are a shuffled subset, with a new category, a new obs column and a changed kind."""
    d = tmp_path_factory.mktemp("append")
    a = ad.read_h5ad(PBMC)
    a.X = sp.csr_matrix(a.X)
    a.obs["n_genes"] = np.diff(a.X.indptr).astype(np.int32)
    first, rest = a[:130].copy(), a[130:].copy()
    first.write_h5ad(d / "first.h5ad")
    rng = np.random.default_rng(7)
    keep = np.sort(rng.choice(a.n_vars, size=a.n_vars - 300, replace=False))
    genes = rng.permutation(a.var_names[keep])
    second = rest[:, genes].copy()
    second.obs["depth_bin"] = second.obs["depth_bin"].cat.add_categories(["q6"])
    second.obs.iloc[::7, second.obs.columns.get_loc("depth_bin")] = "q6"
    second.obs["batch"] = pd.Categorical(["b2"] * second.n_obs)
    second.write_h5ad(d / "second.h5ad")
    return d, a, first, second


@pytest.fixture
def base(parts, tmp_path):
    d, a, first, _ = parts
    out = tmp_path / "ds"
    convert_h5ad(str(d / "first.h5ad"), str(out), tile_size=TILE, level=3, log=None)
    return out


def expected(a, cells, names):
    """Rows ``cells`` of pbmc200 in the dataset's column order ``names``."""
    return a.X[cells][:, [a.var_names.get_loc(g) for g in names]]


def test_append_equals_the_inputs_concatenated(parts, base):
    d, a, first, second = parts
    before = files(base)
    report = deltacells.append(str(base), str(d / "second.h5ad"))
    assert (report.cells_added, report.n_cells, report.n_tiles) == (70, 200, 4)
    assert report.tile_rewritten == 2 and report.tiles_added == 1 and not report.already_appended
    # Full tiles are not rewritten: byte for byte what they were.
    after = files(base)
    for t in (0, 1):
        name = f"tiles/tile_{t:06d}.dct"
        assert after[name] == before[name]
    assert after["tiles/tile_000002.dct"] != before["tiles/tile_000002.dct"]
    assert not (base / "append-staging").exists() and not (base / "append-in-progress.json").exists()

    ds = open_dataset(str(base))
    names = ds.var_names
    # The new cells' genes the input lacks are zero; the rest equal pbmc200, re-indexed by pandas.
    lacking = [g for g in names if g not in set(second.var_names)]
    want = expected(a, list(range(200)), names).tolil()
    want[130:, [names.index(g) for g in lacking]] = 0
    assert same(ds[:].to_scipy(), sp.csr_matrix(want))
    for batch in ([199, 0, 129, 130, 150], list(range(120, 140))):
        assert same(ds.get_batch(batch).to_scipy(), sp.csr_matrix(want)[batch])

    # Obs: the old cells' codes keep their meaning, the new category comes last, the new column is missing for
    # the old cells.
    obs = ds.obs.to_pandas()
    assert list(obs["obs_names"]) == list(a.obs_names)
    depth = [str(v) for v in obs["depth_bin"]]
    assert depth == [str(v) for v in first.obs["depth_bin"]] + [str(v) for v in second.obs["depth_bin"]]
    schema = json.loads((base / "obs" / "schema.json").read_text())
    cats = {c["name"]: c.get("categories") for c in schema["columns"]}
    assert cats["depth_bin"] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert obs["batch"].isna()[:130].all() and (obs["batch"][130:] == "b2").all()
    assert list(obs["n_genes"]) == list(a.obs["n_genes"])
    assert "column 'batch'" in " ".join(report.obs_rewrite_reasons) or '"batch"' in " ".join(report.obs_rewrite_reasons)

    meta = json.loads((base / "manifest.json").read_text())["metadata"]
    record = meta["appends"][-1]
    assert record["first_cell"] == 130 and record["n_cells"] == 70
    assert record["inputs"][0]["sha256"] == digest(d / "second.h5ad")
    assert record["inputs"][0]["size_bytes"] == (d / "second.h5ad").stat().st_size
    assert meta["inputs"] == [str(d / "first.h5ad")]  # the conversion's own record stays
    r = run_module("verify", str(base))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_same_append_again_changes_nothing(parts, base):
    d = parts[0]
    deltacells.append(str(base), str(d / "second.h5ad"))
    before = files(base)
    again = deltacells.append(str(base), str(d / "second.h5ad"))
    assert again.already_appended and again.cells_added == 70
    assert files(base) == before
    r = run_module("append", str(base), str(d / "second.h5ad"))
    assert r.returncode == 0 and "appended already" in r.stdout and files(base) == before
    # On purpose, it is appended again.
    twice = deltacells.append(str(base), str(d / "second.h5ad"), allow_repeat=True)
    assert not twice.already_appended and twice.n_cells == 270
    ds = open_dataset(str(base))
    assert same(ds.get_batch(list(range(200, 270))).to_scipy(), ds.get_batch(list(range(130, 200))).to_scipy())
    assert len(json.loads((base / "manifest.json").read_text())["metadata"]["appends"]) == 2


def test_an_input_appended_before_is_refused_with_others(parts, base, tmp_path):
    d, a = parts[0], parts[1]
    deltacells.append(str(base), str(d / "second.h5ad"))
    extra = tmp_path / "extra.h5ad"
    a[:10].copy().write_h5ad(extra)
    before = files(base)
    with pytest.raises(ValueError, match="appended to .* already .*allow-repeat"):
        deltacells.append(str(base), [str(extra), str(d / "second.h5ad")])
    assert files(base) == before


def test_new_genes_are_refused_or_dropped(parts, base, tmp_path):
    a = parts[1]
    more = a[130:160].copy()
    more.var_names = [f"NEW{i}" if i < 3 else g for i, g in enumerate(more.var_names)]
    more.write_h5ad(tmp_path / "more.h5ad")
    before = files(base)
    with pytest.raises(ValueError, match=r"3 genes that .* lacks \(\"NEW0\", \"NEW1\", \"NEW2\"\).*drop-new-genes"):
        deltacells.append(str(base), str(tmp_path / "more.h5ad"))
    assert files(base) == before
    report = deltacells.append(str(base), str(tmp_path / "more.h5ad"), drop_new_genes=True)
    assert report.genes_dropped == 3 and report.genes_dropped_examples == ["NEW0", "NEW1", "NEW2"]
    ds = open_dataset(str(base))
    names = ds.var_names
    want = expected(a, list(range(130, 160)), names).tolil()
    want[:, [names.index(g) for g in a.var_names[:3]]] = 0
    assert same(ds.get_batch(list(range(130, 160))).to_scipy(), sp.csr_matrix(want))


def test_genes_matched_by_a_gene_table_column(parts, base, tmp_path):
    a = parts[1]
    other = a[130:].copy()
    other.var_names = [f"renamed{i}" for i in range(other.n_vars)]  # names differ, Ensembl IDs agree
    other.write_h5ad(tmp_path / "ids.h5ad")
    with pytest.raises(ValueError, match="genes that"):
        deltacells.append(str(base), str(tmp_path / "ids.h5ad"))
    deltacells.append(str(base), str(tmp_path / "ids.h5ad"), gene_key="gene_ids")
    ds = open_dataset(str(base))
    assert same(ds[:].to_scipy(), expected(a, list(range(200)), ds.var_names))


def test_conflicting_obs_kinds_and_missing_datasets_are_refused(parts, base, tmp_path):
    d, a = parts[0], parts[1]
    bad = a[130:].copy()
    bad.obs["depth_bin"] = np.arange(bad.n_obs, dtype=np.float64)
    bad.write_h5ad(tmp_path / "bad.h5ad")
    before = files(base)
    with pytest.raises(ValueError, match="obs column \"depth_bin\" holds category values .* numeric"):
        deltacells.append(str(base), str(tmp_path / "bad.h5ad"))
    assert files(base) == before
    with pytest.raises(ValueError, match="no dataset at"):
        deltacells.append(str(tmp_path / "nothing"), str(d / "second.h5ad"))


def test_version_1_counts_a_version_1_tile_cannot_hold(parts, tmp_path):
    d, a = parts[0], parts[1]
    out = tmp_path / "v1"
    convert_h5ad(str(d / "first.h5ad"), str(out), tile_size=TILE, level=3, format_version=1, log=None)
    big = a[130:].copy()
    x = big.X.tolil()
    x[5, 3] = 70_000
    big.X = sp.csr_matrix(x)
    big.write_h5ad(tmp_path / "big.h5ad")
    before = files(out)
    with pytest.raises(ValueError, match="65535|65,535"):
        deltacells.append(str(out), str(tmp_path / "big.h5ad"))
    assert files(out) == before
    deltacells.append(str(out), str(d / "second.h5ad"))
    assert json.loads((out / "manifest.json").read_text())["version"] == 1
    ds = open_dataset(str(out))
    assert ds.n_cells == 200


def test_a_reader_opened_before_sees_an_error_not_new_rows(parts, base):
    d = parts[0]
    stale = open_dataset(str(base))
    old_first = stale.get_batch([0, 1]).to_scipy()
    deltacells.append(str(base), str(d / "second.h5ad"))
    # Full tiles are still the same tiles.
    assert same(stale.get_batch([0, 1]).to_scipy(), old_first)
    with pytest.raises(deltacells.DatasetChangedError, match="open it again"):
        stale.get_batch([120])
    fresh = open_dataset(str(base))
    assert fresh.n_cells == 200 and fresh.get_batch([120]).to_scipy().shape == (1, fresh.n_genes)


def test_a_dataset_opened_again_after_an_append_is_refused_not_read_under_other_indices(parts, base):
    """A pickled dataset (what a DataLoader worker gets) or a closed one opens its reader again on first use: after
    an append the manifest is another, and reading it as if it were the same would shift cells."""
    d = parts[0]
    ds = open_dataset(str(base))
    before = ds.get_batch([0, 1]).to_scipy()
    again = pickle.loads(pickle.dumps(ds))
    assert same(again.get_batch([0, 1]).to_scipy(), before)  # unchanged: opened again as it was
    shipped = pickle.dumps(ds)
    deltacells.append(str(base), str(d / "second.h5ad"))
    with pytest.raises(deltacells.DatasetChangedError, match="changed since it was opened"):
        pickle.loads(shipped).get_batch([0])
    ds.close()
    with pytest.raises(deltacells.DatasetChangedError, match="open it again"):
        ds.get_batch([0])
    assert open_dataset(str(base)).n_cells == 200


def test_obs_read_by_a_handle_opened_before_an_append_are_refused_as_changed_not_called_damaged(parts, base, tmp_path):
    """The obs of a dataset appended to since the handle was opened: their shards no longer match the manifest the
    handle read. That is a changed dataset (``DatasetChangedError``), not a damaged one to convert again."""
    d = parts[0]
    ds = open_dataset(str(base), cache_dir=str(tmp_path / "cache"))
    columns = ds.obs.columns
    deltacells.append(str(base), str(d / "second.h5ad"))
    with pytest.raises(deltacells.DatasetChangedError, match="appended to") as raised:
        ds.obs.localize(columns)
    assert "re-run the conversion" not in str(raised.value)
    fresh = open_dataset(str(base), cache_dir=str(tmp_path / "cache"))
    assert len(fresh.obs.take(np.arange(fresh.n_cells), columns[:1], warn=False)[columns[0]]) == 200


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_loader_s_workers_refuse_a_dataset_appended_to_after_the_loader_was_made(parts, base, context):
    """The loader's workers open the dataset again: one appended to since the loader was made is refused there
    (cells under other indices), not read as it is now."""
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    d = parts[0]
    loader = make_loader(str(base), 4, num_workers=1, shuffle=False, multiprocessing_context=context,
                         persistent_workers=False)
    plain = torch_dataloader(DeltaCellsIterableDataset(str(base), 4, shuffle=False), context)
    deltacells.append(str(base), str(d / "second.h5ad"))
    for it in (loader, plain):
        with pytest.raises(deltacells.DatasetChangedError, match="changed since it was opened"):
            next(iter(it))


def torch_dataloader(dataset, context):
    import torch

    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=context)


@pytest.mark.parametrize("how", ["pickle", "loader"])
def test_a_corpus_whose_member_grew_is_refused_in_another_process_naming_the_member(parts, base, tmp_path, how):
    """Member 0 appended to after the corpus was opened: in a worker (or any process the corpus is pickled to),
    member 1's cells would start elsewhere; the corpus says which member changed instead."""
    d = parts[0]
    other = tmp_path / "other"
    convert_h5ad(str(d / "first.h5ad"), str(other), tile_size=TILE, level=3, log=None)
    corpus = deltacells.open_corpus({"grows": str(base), "other": str(other)})
    held_out = corpus.select(range(130, 140))  # member 1's first cells
    truth = held_out.get_batch(range(10)).to_scipy()
    shipped = pickle.dumps(held_out)
    assert same(pickle.loads(shipped).get_batch(range(10)).to_scipy(), truth)
    deltacells.append(str(base), str(d / "second.h5ad"))
    if how == "pickle":
        with pytest.raises(deltacells.DatasetChangedError, match="corpus member 'grows'.*changed since it was opened"):
            pickle.loads(shipped).get_batch(range(10))
    else:
        torch = require("torch")
        from deltacells.torch import make_loader

        loader = make_loader(held_out, 4, num_workers=1, shuffle=False, multiprocessing_context="spawn")
        with pytest.raises(deltacells.DatasetChangedError, match="corpus member 'grows'"):
            next(iter(loader))
        assert torch is not None


def test_cli_json(parts, base):
    d = parts[0]
    r = run_module("append", str(base), str(d / "second.h5ad"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cells_added"] == 70 and out["n_cells"] == 200 and out["tile_rewritten"] == 2
    assert out["record"]["inputs"][0]["sha256"] == digest(d / "second.h5ad")


def comparable(ds: Path) -> dict[str, object]:
    """A dataset's files, the manifest without the append's time and the conversion's plan (which names the
    output)."""
    out: dict[str, object] = files(ds)
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["metadata"].pop("convert_plan")
    for record in manifest["metadata"].get("appends", []):
        record.pop("time")
    out["manifest.json"] = manifest
    return out


def test_appends_killed_at_random_moments_are_completed_by_running_them_again(parts, tmp_path):
    """SIGKILL at seeded random moments: each run either left the dataset as it was or is completed by running the
    same append again, and the result is the clean append's, file for file."""
    d = parts[0]
    clean = tmp_path / "clean"
    convert_h5ad(str(d / "first.h5ad"), str(clean), tile_size=TILE, level=3, log=None)
    deltacells.append(str(clean), str(d / "second.h5ad"), level=19)
    want = comparable(clean)
    rng = random.Random(20261204)
    for trial in range(10):
        ds = tmp_path / f"trial{trial}"
        convert_h5ad(str(d / "first.h5ad"), str(ds), tile_size=TILE, level=3, log=None)
        start = files(ds)
        cmd = [sys.executable, "-m", "deltacells", "append", str(ds), str(d / "second.h5ad"), "--level", "19",
               "--threads", "1"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.15, 0.7))
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        now = files(ds)
        untouched = {k: v for k, v in now.items() if not k.startswith("append")} == start
        journal = (ds / "append-in-progress.json").exists()
        # Either nothing changed, or a journal says an append is under way, or it finished.
        changed = sorted(k for k in set(now) | set(start) if now.get(k) != start.get(k))
        assert untouched or journal or json.loads((ds / "manifest.json").read_text())["n_cells"] == 200, changed
        r = run_module("append", str(ds), str(d / "second.h5ad"), "--level", "19")
        assert r.returncode == 0, r.stderr
        assert comparable(ds) == want, f"trial {trial}"


def test_only_the_shards_the_new_tiles_join_are_rewritten_unless_codes_widen(parts, tmp_path):
    """Shards of 2 tiles: an append that keeps the schema's stored form rewrites the shard holding the last tile
    only; one whose category vocabulary outgrows int8 codes rewrites every shard, says so, and the old codes keep
    their labels."""
    a = parts[1]
    first = a[:130].copy()
    first.obs["label"] = pd.Categorical([f"c{i % 100}" for i in range(130)])
    first.write_h5ad(tmp_path / "first.h5ad")
    out = tmp_path / "ds"
    convert_h5ad(str(tmp_path / "first.h5ad"), str(out), tile_size=TILE, level=3, obs_tiles_per_file=2, log=None)
    shard0 = digest(out / "obs" / "obs_0000.parquet")
    same_kind = a[130:160].copy()
    same_kind.obs["label"] = pd.Categorical([f"c{i % 100}" for i in range(30)])
    same_kind.write_h5ad(tmp_path / "same.h5ad")
    report = deltacells.append(str(out), str(tmp_path / "same.h5ad"))
    assert report.obs_shards_written == [1] and report.obs_rewrite_reasons == []
    assert digest(out / "obs" / "obs_0000.parquet") == shard0
    wider = a[160:].copy()
    wider.obs["label"] = pd.Categorical([f"new{i}" for i in range(40)])
    wider.write_h5ad(tmp_path / "wider.h5ad")
    report = deltacells.append(str(out), str(tmp_path / "wider.h5ad"))
    assert report.obs_shards_written == [0, 1] and "int8 to int16" in " ".join(report.obs_rewrite_reasons)
    labels = [str(v) for v in open_dataset(str(out)).obs.to_pandas()["label"]]
    assert labels == [f"c{i % 100}" for i in range(130)] + [f"c{i % 100}" for i in range(30)] + \
        [f"new{i}" for i in range(40)]


def test_append_on_an_object_store(parts):
    """The dataset on S3 (the server CI starts): staged objects moved in by server-side copies, the journal by a
    conditional PUT."""
    from deltacells import StoreBackend

    d, a = parts[0], parts[1]
    url, options = s3_or_skip()
    convert_h5ad(str(d / "first.h5ad"), url, tile_size=TILE, level=3, log=None, storage_options=options)
    report = deltacells.append(url, str(d / "second.h5ad"), storage_options=options)
    assert (report.n_cells, report.tile_rewritten) == (200, 2)
    ds = open_dataset(StoreBackend(url, options))
    names = ds.var_names
    lacking = [g for g in names if g not in set(parts[3].var_names)]
    want = expected(a, list(range(200)), names).tolil()
    want[130:, [names.index(g) for g in lacking]] = 0
    assert same(ds[:].to_scipy(), sp.csr_matrix(want))
    assert deltacells.append(url, str(d / "second.h5ad"), storage_options=options).already_appended
