"""`deltacells report` and `Dataset.report()`: one self-contained page whose numbers equal `deltacells info --json`,
opened in headless Chromium (not blank; each section shows), from the command line and from Python; sampling; the
benchmark section; refusals."""

import collections
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import CONFORMANCE, TESTDATA, expected_csr, in_ci, load_json, require, run_module, s3_or_skip

ad = require("anndata")
pd = require("pandas")

from deltacells import FormatError, Report, open_dataset  # noqa: E402
from deltacells.convert import convert_h5ad  # noqa: E402

PBMC = TESTDATA / "inputs" / "pbmc200" / "pbmc200.h5ad"
SECTIONS = ["summary", "cells", "tiles", "chunks", "genes", "obs", "bench"]


class Figures(HTMLParser):
    """The page's section ids, its `data-key` figures and whether it asks for anything over the network."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.values: dict[str, str] = {}
        self.texts: dict[str, str] = {}  # what a reader sees in each figure's cell
        self.svgs = 0
        self.remote: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a["id"])
        if tag == "svg":
            self.svgs += 1
        if "data-key" in a and "data-value" in a:
            self.values[a["data-key"]] = a["data-value"]
            self._in = a["data-key"]
            self.texts[self._in] = ""
        for k in ("src", "href", "action", "poster", "srcset", "data"):
            if a.get(k, "").lstrip().startswith(("http:", "https:", "//", "ws:", "wss:")):
                self.remote.append(a[k])

    def handle_data(self, data):
        if self._in is not None:
            self.texts[self._in] += data

    def handle_endtag(self, tag):
        if tag == "td":
            self._in = None


def figures(html: str) -> Figures:
    f = Figures()
    f.feed(html)
    return f


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """pbmc200 in 50-cell tiles with obs of every kind: categories, numbers, booleans (some missing), strings."""
    d = tmp_path_factory.mktemp("report")
    a = ad.read_h5ad(PBMC)
    a.X = sp.csr_matrix(a.X)
    rng = np.random.default_rng(20261205)
    a.obs["tissue"] = pd.Categorical(rng.choice(["lung", "blood", "liver"], a.n_obs))
    a.obs["n_genes"] = np.diff(a.X.indptr).astype(np.int32)
    score = rng.normal(size=a.n_obs)
    score[:10] = np.nan
    a.obs["score"] = score
    a.obs["qc_pass"] = pd.array([None if i % 17 == 0 else bool(i % 2) for i in range(a.n_obs)], dtype="boolean")
    a.obs["barcode"] = [f"BC{i:05d}" for i in range(a.n_obs)]
    # More categories than the page shows (30), of uneven sizes with ties.
    a.obs["cluster"] = pd.Categorical([f"k{int(45 * rng.random() ** 2):02d}" for _ in range(a.n_obs)],
                                      categories=[f"k{k:02d}" for k in range(45)])
    a.write_h5ad(d / "in.h5ad")
    out = d / "ds"
    convert_h5ad(str(d / "in.h5ad"), str(out), tile_size=50, level=3, log=None)
    bench = run_module("bench", str(out), "--json", "--batch-size", "40", "--max-cells", "200", "--sample-tiles", "2")
    assert bench.returncode == 0, bench.stderr
    (d / "bench.json").write_text(bench.stdout)
    return out, a, d / "bench.json"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if in_ci():
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed")
    return found


def screenshot(page: Path, out: Path, height: int) -> "np.ndarray":
    """The page as headless Chromium draws it, as an RGB array (the network closed, a fresh profile)."""
    image = require("PIL.Image")
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={out.parent / 'chromium-profile'}", f"--screenshot={out}",
           f"--window-size=1280,{height}", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode < 0:
        # The browser killed by a signal (a segfault of headless Chromium, seen about once in hundreds of
        # screenshots on CI machines) says nothing of the page: once more. A page it cannot draw fails both times.
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and out.exists(), r.stderr[-2000:]
    return np.asarray(image.open(out).convert("RGB"))


def test_the_page_shows_what_info_says_and_each_section(dataset, tmp_path):
    ds_path, a, bench = dataset
    page = tmp_path / "page.html"
    r = run_module("report", str(ds_path), "--output", str(page), "--bench", str(bench), "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    html = page.read_text()
    f = figures(html)
    assert f.sections == SECTIONS and f.svgs >= 9 and not f.remote
    # Every figure of `deltacells info --json` is in the summary, exactly and as it is shown.
    info = json.loads(run_module("info", str(ds_path), "--json").stdout)
    assert len(info) > 15
    for key, value in info.items():
        if key == "dataset":
            continue
        assert key in f.values, f"{key} is not on the page"
        exact, text = json.loads(f.values[key]), f.texts[key]
        if isinstance(value, bool) or value is None or isinstance(value, str):
            assert exact == value and text == ("–" if value is None else str(value).lower()
                                               if isinstance(value, bool) else value), (key, text)
        elif isinstance(value, int):
            assert exact == value and text.replace(",", "") == str(value), (key, text)
        else:
            assert exact == pytest.approx(value) and float(text) == pytest.approx(value, rel=1e-3), (key, text)
    assert not any("<script" in line for line in html.splitlines()), "nothing runs in the page"
    assert shown["facts"] == {k: v for k, v in info.items() if k != "dataset"}
    # The obs figures equal the source's, read by pandas.
    assert f.values["obs.score.missing"] == "10" and shown["obs"]["score"] == {"kind": "numeric", "missing": 10}
    assert int(f.values["obs.qc_pass.missing"]) == int(a.obs["qc_pass"].isna().sum())
    assert shown["sample"] == {"tiles": 4, "cells": 200, "how": "every tile (4) decoded"}
    # Category counts: the 30 most frequent of the vocabulary's 45, as pandas counts them (ties by name).
    counts = a.obs["cluster"].value_counts()
    counts = counts[counts > 0]
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:30]
    assert shown["obs"]["cluster"]["categories"] == 45
    assert [tuple(t) for t in shown["obs"]["cluster"]["top"]] == [(k, int(n)) for k, n in top]
    assert "The 30 most frequent of 45 categories." in html

    # Drawn: the page is not blank, and each section alone (the others hidden by a style added to a copy) shows
    # something, and not the same picture as another.
    whole = screenshot(page, tmp_path / "whole.png", 5200)
    assert (whole < 200).any(axis=2).mean() > 0.02, "the page is blank"
    seen = []
    for section in SECTIONS:
        alone = tmp_path / f"only-{section}.html"
        hide = f"<style>h1,nav,p.note:not(section p),section:not(#{section}){{display:none}}</style></head>"
        alone.write_text(html.replace("</head>", hide, 1))
        shot = screenshot(alone, tmp_path / f"{section}.png", 700)
        dark = (shot < 200).any(axis=2).mean()
        assert dark > 0.01, f"section {section} shows nothing"
        assert not any(np.array_equal(shot, s) for s in seen), f"section {section} is not in view"
        seen.append(shot)


def test_python_report_shows_inline_and_saves_the_same_page(dataset, tmp_path):
    ds_path, a, bench = dataset
    ds = open_dataset(str(ds_path))
    report = ds.report(bench=bench, title="PBMC 200")
    assert isinstance(report, Report) and report._repr_html_() == report.html
    assert "<title>PBMC 200</title>" in report.html
    saved = report.save(tmp_path / "r.html")
    assert Path(saved).read_text() == report.html
    r = run_module("report", str(ds_path), "--output", str(tmp_path / "cli.html"), "--bench", str(bench),
                   "--title", "PBMC 200")
    assert r.returncode == 0, r.stderr
    assert figures((tmp_path / "cli.html").read_text()).values == figures(report.html).values
    # A bench given as the parsed dict is the same section.
    again = ds.report(bench=json.loads(Path(bench).read_text()), title="PBMC 200")
    assert figures(again.html).values == figures(report.html).values
    assert "PBMC 200" in repr(report) or "200 cells" in repr(report)


def test_a_large_dataset_is_sampled_and_says_how(dataset):
    ds_path, a, _ = dataset
    report = open_dataset(str(ds_path)).report(sample_tiles=2)
    assert report.facts["sample"] == {"tiles": 2, "cells": 100, "how": "2 of 4 tiles decoded, evenly spread (first "
                                      "and last included)"}
    assert "2 of 4 tiles decoded" in report.html and "bench" not in figures(report.html).sections
    # The sampled cells are the first and last tiles' (50 cells each).
    f = figures(report.html)
    assert f.values["sample_cells"] == "100"


def test_refusals(dataset, tmp_path):
    ds_path, _, _ = dataset
    (tmp_path / "not-bench.json").write_text('{"hello": 1}')
    r = run_module("report", str(ds_path), "--output", str(tmp_path / "x.html"), "--bench",
                   str(tmp_path / "not-bench.json"))
    assert r.returncode != 0 and "deltacells bench" in r.stderr and not (tmp_path / "x.html").exists()
    with pytest.raises(ValueError, match="deltacells bench"):
        open_dataset(str(ds_path)).report(bench={"hello": 1})
    # A corrupt tile in the sample is named.
    bad = tmp_path / "bad"
    shutil.copytree(ds_path, bad)
    tile = bad / "tiles" / "tile_000001.dct"
    data = bytearray(tile.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tile.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="tile_000001"):
        open_dataset(str(bad)).report()
    r = run_module("report", str(bad), "--output", str(tmp_path / "y.html"))
    assert r.returncode != 0 and "tile_000001" in r.stderr and "verify" in r.stderr
    assert os.path.exists(ds_path)


@pytest.mark.parametrize("name", ["v1_with_obs", "v2_with_obs"])
def test_reports_of_both_format_versions_match_the_conformance_files(name):
    """Datasets written by independent implementations: the page's figures are their expected contents'."""
    exp = load_json(CONFORMANCE / "datasets" / f"{name}.expected.json")
    report = open_dataset(str(CONFORMANCE / "datasets" / name)).report()
    v = figures(report.html).values
    assert (int(v["version"]), int(v["n_cells"]), int(v["n_genes"]), int(v["nnz"])) == \
        (exp["version"], exp["n_cells"], exp["n_genes"], exp["nnz"])
    # Every tile decoded: the sampled cells' nonzeros are the expected matrix's rows'.
    assert report.facts["sample"]["cells"] == exp["n_cells"]
    assert int(v["sample_cells"]) == expected_csr(exp).shape[0]
    # Per obs column, its kind and the cells without a value; per category column, the 30 most frequent of its
    # vocabulary (ties by name), counted from the expected values (donor has 150 categories).
    want = {c["name"]: {"kind": c["kind"], "missing": sum(v is None for v in c["values"])} for c in exp["obs"]}
    for c in exp["obs"]:
        counts = collections.Counter(x for x in c["values"] if x is not None)
        top = [list(t) for t in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:30]]
        if c["kind"] == "category":
            want[c["name"]].update(categories=len(c["categories"]), top=top)
        elif c["kind"] == "string":
            # Every value read (fewer than the 200,000 a report reads), counted as categories are.
            want[c["name"]].update(distinct=len(counts), read=sum(counts.values()), top=top)
    assert report.facts["obs"] == want
    assert len(want["donor"]["top"]) == 30 < want["donor"]["categories"]
    # A string column whose values repeat is drawn as a category column is; one of distinct values (barcodes) is not.
    block = {name: report.html.split(f"{name} (string)</h3>", 1)[1].split("<h3", 1)[0] for name in ("batch", "barcode")}
    assert "<svg" in block["batch"] and "<svg" not in block["barcode"]
    assert all(v[f"obs.{name}.missing"] == str(w["missing"]) for name, w in want.items())


def test_a_loader_timeline_is_drawn_as_the_reading_section(dataset, tmp_path):
    """``deltacells.Timeline`` over the training loader: every batch recorded with its cells, and the report
    (from the Timeline or its dict in Python, from the saved file on the command line) shows its throughput."""
    require("torch")
    from deltacells import Timeline
    from deltacells.torch import make_loader

    ds_path, a, _ = dataset
    timeline = Timeline(make_loader(str(ds_path), 40))
    seen = sum(batch["X"].shape[0] for batch in timeline)
    t = timeline.to_json()
    assert seen == a.n_obs and t["batch_cells"] == a.n_obs and len(t["batch_timeline"]) == 5
    assert all(b[1] >= 0 for b in t["batch_timeline"]) and t["batch_timeline"][-1][0] == t["batch_seconds"]
    report = open_dataset(str(ds_path)).report(bench=t)
    f = figures(report.html)
    assert "bench" in f.sections and float(f.values["bench.batch_cells_per_second"]) == t["batch_cells_per_second"]
    assert "deltacells.Timeline" in report.html
    given = open_dataset(str(ds_path)).report(bench=timeline)  # the Timeline itself, as the README says
    assert figures(given.html).values == f.values
    saved = timeline.save(tmp_path / "timeline.json")
    r = run_module("report", str(ds_path), "--output", str(tmp_path / "t.html"), "--bench", saved)
    assert r.returncode == 0, r.stderr
    assert figures((tmp_path / "t.html").read_text()).values == f.values


def test_a_dataset_on_an_object_store_reports_what_the_local_copy_does(dataset, tmp_path):
    """The same cells on S3 (the server CI starts), through a ``StoreBackend`` in Python and ``--store-option`` on
    the command line: the page's figures are the local dataset's."""
    from deltacells import StoreBackend

    ds_path, _, _ = dataset
    url, options = s3_or_skip()
    convert_h5ad(str(ds_path.parent / "in.h5ad"), url, tile_size=50, level=3, log=None, storage_options=options)
    local = figures(open_dataset(str(ds_path)).report().html).values
    remote = figures(open_dataset(StoreBackend(url, options)).report(title="x").html).values
    assert remote == local
    opts = [a for k, v in options.items() for a in ("--store-option", f"{k}={v}")]
    r = run_module("report", url, "--output", str(tmp_path / "s3.html"), *opts)
    assert r.returncode == 0, r.stderr
    assert figures((tmp_path / "s3.html").read_text()).values == local
