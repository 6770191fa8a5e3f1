"""`deltacells merge`: datasets with the same genes as one, checked against the sources read by anndata; tiles
copied byte for byte where they fall whole on the new tiles, cut anew after a partial last tile; obs combined; the
refusals. (An interrupted merge completed by running it again: `crates/dct-convert/tests/convert/merge.rs`.)"""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import TESTDATA, dataset_files, kill_trials, require, run_module, s3_or_skip, same, timed_run

ad = require("anndata")
pd = require("pandas")

from deltacells import open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad, merge  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """pbmc200 cut into A (cells 0-119, with obs column ``site``) and B (120-199, ``site`` with other labels and a
    column of its own), each converted with the genes in the source's order."""
    d = tmp_path_factory.mktemp("merge")
    a = ad.read_h5ad(PBMC)
    a.X = sp.csr_matrix(a.X)
    first, second = a[:120].copy(), a[120:].copy()
    first.obs["site"] = pd.Categorical(["lung"] * 60 + ["blood"] * 60)
    second.obs["site"] = pd.Categorical(["liver"] * 80)
    second.obs["donor"] = pd.Categorical([f"d{i % 3}" for i in range(80)])
    first.write_h5ad(d / "a.h5ad")
    second.write_h5ad(d / "b.h5ad")
    return d, a, first, second


def convert(d, name, tile_size):
    out = d / f"{name}_{tile_size}"
    if not out.exists():
        convert_h5ad(str(d / f"{name}.h5ad"), str(out), tile_size=tile_size, level=3, sort_genes=False, log=None)
    return out


def check(ds, a, first, second):
    assert ds.n_cells == 200
    assert same(ds[:].to_scipy(), a.X)
    obs = ds.obs.to_pandas()
    assert [str(v) for v in obs["site"]] == [str(v) for v in first.obs["site"]] + [str(v) for v in second.obs["site"]]
    assert obs["donor"].isna()[:120].all() and [str(v) for v in obs["donor"][120:]] == list(second.obs["donor"])
    assert list(obs["obs_names"]) == list(a.obs_names)


def test_aligned_sources_are_copied_tile_for_tile(sources, tmp_path):
    d, a, first, second = sources
    ta, tb = convert(d, "a", 40), convert(d, "b", 40)  # 120 cells: three full tiles
    report = merge([str(ta), str(tb)], str(tmp_path / "c"))
    assert report == {"n_cells": 200, "n_tiles": 5, "tiles_copied": 5, "tiles_encoded": 0, "already_done": False}
    for t in range(3):
        assert digest(tmp_path / "c" / "tiles" / f"tile_{t:06d}.dct") == digest(ta / "tiles" / f"tile_{t:06d}.dct")
        # Local sources are hard-linked, not copied through the process.
        assert (tmp_path / "c" / "tiles" / f"tile_{t:06d}.dct").stat().st_ino == \
            (ta / "tiles" / f"tile_{t:06d}.dct").stat().st_ino
    for t in range(2):
        assert digest(tmp_path / "c" / "tiles" / f"tile_{3 + t:06d}.dct") == digest(tb / "tiles" / f"tile_{t:06d}.dct")
    check(open_dataset(str(tmp_path / "c")), a, first, second)
    meta = json.loads((tmp_path / "c" / "manifest.json").read_text())["metadata"]["merge"]
    assert [s["n_cells"] for s in meta["sources"]] == [120, 80]


def test_after_a_partial_last_tile_the_cells_are_cut_anew(sources, tmp_path):
    d, a, first, second = sources
    ta, tb = convert(d, "a", 50), convert(d, "b", 50)  # A: 50, 50, 20
    r = run_module("merge", str(ta), str(tb), "--output", str(tmp_path / "c"), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert (report["tiles_copied"], report["tiles_encoded"], report["n_tiles"]) == (2, 2, 4)
    check(open_dataset(str(tmp_path / "c")), a, first, second)
    r = run_module("verify", str(tmp_path / "c"))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.filterwarnings("ignore:Observation names are not unique")
def test_tails_last_copies_every_full_tile_and_moves_the_partial_ones_to_the_end(sources, tmp_path):
    """A (50, 50, 20), B (50, 30) and A again, with ``tails_last``: the full tiles of A, B, A copied as they are
    (hard links), then A's 20 last cells and B's 30 encoded again as one tile, and the second A's last tile, the
    last of all, copied too; the rows, obs and ``metadata.merge.segments`` say that order, checked against the
    sources read by anndata."""
    d, a, first, second = sources
    ta, tb = convert(d, "a", 50), convert(d, "b", 50)
    out = tmp_path / "c"
    report = merge([str(ta), str(tb), str(ta)], str(out), tails_last=True)
    assert (report["tiles_copied"], report["tiles_encoded"], report["n_tiles"]) == (6, 1, 7)
    src = [(0, ta, 0), (1, ta, 1), (2, tb, 0), (3, ta, 0), (4, ta, 1), (6, ta, 2)]
    for t, ds, k in src:
        assert (out / "tiles" / f"tile_{t:06d}.dct").stat().st_ino == (ds / "tiles" / f"tile_{k:06d}.dct").stat().st_ino
    # Rows of the sources in the order written: full tiles, then the tails.
    order = [(first, 0, 100), (second, 0, 50), (first, 0, 100), (first, 100, 120), (second, 50, 80), (first, 100, 120)]
    want = ad.concat([part[lo:hi] for part, lo, hi in order], join="outer")
    ds = open_dataset(str(out))
    assert ds.n_cells == 320 and same(ds[:].to_scipy(), sp.csr_matrix(want.X))
    obs = ds.obs.to_pandas()
    assert list(obs["obs_names"]) == list(want.obs_names)
    assert [str(v) for v in obs["site"]] == [str(v) for v in want.obs["site"]]
    segments = ds.manifest.metadata["merge"]["segments"]
    assert segments == [
        {"source": 0, "cells": [0, 100], "at": 0}, {"source": 1, "cells": [0, 50], "at": 100},
        {"source": 2, "cells": [0, 100], "at": 150}, {"source": 0, "cells": [100, 120], "at": 250},
        {"source": 1, "cells": [50, 80], "at": 270}, {"source": 2, "cells": [100, 120], "at": 300},
    ]
    r = run_module("verify", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    # The command writes the same dataset.
    r = run_module("merge", str(ta), str(tb), str(ta), "--tails-last", "--output", str(tmp_path / "cli"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["tiles_encoded"] == 1, r.stderr
    assert dataset_files(tmp_path / "cli") == dataset_files(out)
    # Without it the same sources are a different merge: not written over this one.
    with pytest.raises(FileExistsError):
        merge([str(ta), str(tb), str(ta)], str(out))


def test_different_genes_are_refused_with_the_alternatives(sources, tmp_path):
    d, a = sources[0], sources[1]
    other = a[:30, ::-1].copy()
    other.write_h5ad(tmp_path / "other.h5ad")
    convert_h5ad(str(tmp_path / "other.h5ad"), str(tmp_path / "o"), tile_size=40, level=3, sort_genes=False, log=None)
    with pytest.raises(ValueError, match="same genes in the same order.*open_corpus.*--genes union"):
        merge([str(convert(d, "a", 40)), str(tmp_path / "o")], str(tmp_path / "c"))
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_other_versions_and_conflicting_obs_kinds_are_refused_naming_the_sources(sources, tmp_path):
    d, a, first, second = sources
    v1 = tmp_path / "v1"
    convert_h5ad(str(d / "a.h5ad"), str(v1), tile_size=40, level=3, sort_genes=False, log=None, format_version=1)
    v2 = convert(d, "a", 40)
    with pytest.raises(ValueError, match="format version 2.*version 1.*one format version") as e:
        merge([str(v2), str(v1)], str(tmp_path / "c"))
    assert str(v2) in str(e.value) and str(v1) in str(e.value) and "same genes" not in str(e.value)
    # `site` as numbers in a third source: the message names the sources whose `site` holds categories.
    third = second.copy()
    third.obs["site"] = np.arange(third.n_obs, dtype=np.float64)
    third.write_h5ad(tmp_path / "t.h5ad")
    t = tmp_path / "t"
    convert_h5ad(str(tmp_path / "t.h5ad"), str(t), tile_size=40, level=3, sort_genes=False, log=None)
    with pytest.raises(ValueError, match='obs column "site"') as e:
        merge([str(v2), str(convert(d, "b", 40)), str(t)], str(tmp_path / "d"))
    said = str(e.value)
    assert f"in {v2}, {convert(d, 'b', 40)} but " in said and f"in {t}: " in said, said
    assert not (tmp_path / "c" / "manifest.json").exists() and not (tmp_path / "d" / "manifest.json").exists()


def test_a_finished_merge_is_not_replaced_without_overwrite(sources, tmp_path):
    """The same merge again leaves the finished one as it is and says so; another merge into it is refused
    without ``overwrite``."""
    d, a = sources[0], sources[1]
    ta, tb = convert(d, "a", 50), convert(d, "b", 50)
    out = tmp_path / "c"
    merge([str(ta), str(tb)], str(out))
    before = dataset_files(out)
    again = merge([str(ta), str(tb)], str(out))
    assert again["already_done"] and again["n_cells"] == 200 and dataset_files(out) == before
    with pytest.raises(FileExistsError):
        merge([str(tb), str(ta)], str(out))
    with pytest.raises(FileExistsError):
        merge([str(ta), str(tb)], str(out), level=5)
    assert merge([str(ta), str(tb)], str(out), overwrite=True)["n_cells"] == 200
    assert np.array_equal(open_dataset(str(out)).get_batch([0]).to_scipy().toarray(), a.X[[0]].toarray())


def test_merge_on_an_object_store(sources):
    """Sources and output under one S3 bucket (the server CI starts): the tiles that fall whole are copied
    server-side, the rest cut anew; the same rows as the sources."""
    from deltacells import StoreBackend

    d, a, first, second = sources
    url, options = s3_or_skip()
    urls = [f"{url}/a", f"{url}/b"]
    for name, u in zip(("a", "b"), urls):
        convert_h5ad(str(d / f"{name}.h5ad"), u, tile_size=50, level=3, sort_genes=False, log=None,
                     storage_options=options)
    report = merge(urls, f"{url}/c", storage_options=options)
    assert (report["tiles_copied"], report["tiles_encoded"]) == (2, 2)
    check(open_dataset(StoreBackend(f"{url}/c", options)), a, first, second)


def test_merges_killed_at_random_moments_are_completed_by_running_them_again(tmp_path):
    """SIGKILL at seeded random moments of an unaligned merge (2,030 + 1,970 cells in 50-cell tiles, the second's
    cells cut anew at level 19): the output is never a dataset with a manifest that is not the whole merge, and
    running the same command again completes it, file for file equal to a merge never interrupted."""
    a = ad.read_h5ad(PBMC)
    a.X = sp.csr_matrix(a.X)
    big = ad.concat([a] * 20, index_unique="-")
    big.obs["site"] = pd.Categorical(["lung", "blood"] * 2000)
    for name, part in (("a", big[:2030]), ("b", big[2030:])):
        part.copy().write_h5ad(tmp_path / f"{name}.h5ad")
        convert_h5ad(str(tmp_path / f"{name}.h5ad"), str(tmp_path / name), tile_size=50, level=3, sort_genes=False,
                     log=None)
    args = ["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--level", "19"]
    duration = timed_run(*args, "--output", str(tmp_path / "clean"))
    want = dataset_files(tmp_path / "clean")
    assert same(open_dataset(str(tmp_path / "clean"))[:].to_scipy(), big.X)
    out = tmp_path / "out"
    left = kill_trials([*args, "--output", str(out)], out, want, seed=20261205, duration=duration)
    assert "partial" in left, left
