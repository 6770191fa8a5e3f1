"""The public conformance set through the Python API: every good tile and dataset decodes exactly, every bad case
raises (FormatError or the class the API names), never a crash."""

import json

import deltacells
import numpy as np
import pytest
from conftest import CONFORMANCE, bad_tiles, expected_csr, good_tiles, load_json, same
from deltacells import FormatError, Tile, read_tile

GOOD = good_tiles()
BAD = bad_tiles()


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_tiles_decode_exactly(path):
    exp = load_json(path.with_suffix(".expected.json"))
    truth = expected_csr(exp)
    for verify in (True, False):
        t = read_tile(path, verify=verify)
        assert (t.version, t.n_cells, t.n_genes, t.nnz) == (exp["version"], exp["n_cells"], exp["n_genes"], exp["nnz"])
        assert np.array_equal(t.indptr, exp["indptr"])
        for threads in (1, 2, 4):
            d = t.decode(values=np.int32, threads=threads)
            assert np.array_equal(d.indices, exp["indices"]) and np.array_equal(d.values, exp["values"])
            assert d.indices.dtype == np.int32 and d.values.dtype == np.int32
        if exp["nnz"] and max(exp["values"]) < 2**24:
            assert same(t.to_scipy(), truth)
    # Into reused caller buffers, twice, with a sentinel tail left alone.
    n = exp["nnz"]
    oi, ov = np.full(n + 5, -7, np.int32), np.full(n + 5, -7, np.int32)
    for _ in range(2):
        d = Tile(path.read_bytes()).decode(out_indices=oi, out_values=ov, threads=2)
        assert n == 0 or (np.shares_memory(d.indices, oi) and np.shares_memory(d.values, ov))
        assert np.array_equal(d.values, exp["values"]) and (oi[n:] == -7).all() and (ov[n:] == -7).all()


@pytest.mark.parametrize("case", BAD, ids=[c["file"] for c in BAD])
def test_bad_tiles_raise(case):
    blob = (CONFORMANCE / "tiles" / "bad" / case["file"]).read_bytes()
    with pytest.raises(FormatError):
        Tile(blob, verify=True).decode()
    with pytest.raises(FormatError):
        Tile(blob).decode()  # the default checks the CRC too
    if case["expect"] == "error":
        with pytest.raises(FormatError):
            Tile(blob, verify=False).decode(threads=2)
    else:
        try:
            d = Tile(blob, verify=False).decode()
        except FormatError:
            return
        # Without the CRC the tile may decode: then to valid CSR.
        ip = d.indptr
        assert ip[0] == 0 and (np.diff(ip) >= 0).all() and ip[-1] == len(d.indices)
        assert ((d.values >= 1) & (d.values <= 2**31 - 1)).all() and (d.indices < d.n_genes).all()
        for r in range(d.n_cells):
            assert (np.diff(d.indices[ip[r] : ip[r + 1]]) > 0).all()


DATASETS = sorted(p for p in (CONFORMANCE / "datasets").iterdir() if p.is_dir())


def _check_good(root, exp, cache):
    ds = deltacells.open_dataset(str(root), cache_dir=str(cache), verify=True)
    assert (ds.manifest.version, ds.n_cells, ds.n_genes, ds.tile_size) == (
        exp["version"], exp["n_cells"], exp["n_genes"], exp["tile_size"]
    )
    assert ds.manifest.tile_cells == exp["tile_cells"] and ds.manifest.tile_nnz == exp["tile_nnz"]
    rng = np.random.default_rng(0)
    order = rng.permutation(ds.n_cells)
    b = ds.get_batch(order, values_dtype=np.int32)
    assert same(b.to_scipy(), expected_csr(exp)[order])
    assert ds.var_names == exp.get("var_names")
    go = ds.gene_order
    assert (go is None and exp.get("gene_order") is None) or list(go) == exp["gene_order"]
    if exp.get("var"):
        var = ds.var
        assert list(var.index) == exp["var"]["index"] and var.index.name == exp["var"]["index_name"]
        for name, values in exp["var"]["columns"].items():
            assert [None if v != v else v for v in var[name].tolist()] == values, name
    if exp.get("obs"):
        obs = ds.obs
        assert obs.columns == [c["name"] for c in exp["obs"]]
        assert ds.manifest.obs_fingerprint == exp["obs_fingerprint"]
        from deltacells.obs import obs_fingerprint

        got_fp = obs_fingerprint(obs.schema.to_json(), ds.manifest.tile_cells, ds.manifest.obs_shard_sha256)
        assert got_fp == exp["obs_fingerprint"]
        df = obs.to_pandas()
        for col in exp["obs"]:
            got = [None if (v is None or v != v) else v for v in df[col["name"]].astype(object).tolist()]
            want = col["values"]
            if col["kind"] == "bool":
                got = [None if v is None else bool(v) for v in got]
            assert got == want, col["name"]
        obs.verify()


@pytest.mark.parametrize("root", DATASETS, ids=[p.name for p in DATASETS])
def test_datasets(root, tmp_path):
    exp = load_json(root.parent / f"{root.name}.expected.json")
    if exp["expect"] == "ok":
        _check_good(root, exp, tmp_path / "cache")
        return
    want = FileNotFoundError if exp["category"] in ("manifest_missing", "tile_missing") else FormatError
    with pytest.raises(want) as err:
        ds = deltacells.open_dataset(str(root), cache_dir=str(tmp_path / "cache"), verify=True)
        if exp["stage"] in ("read", "verify"):
            ds.get_batch(np.arange(ds.n_cells))
        if exp["stage"] == "verify" and ds.obs is not None:
            ds.obs.verify()
    if "tile" in exp:
        assert f"tile {exp['tile']}" in str(err.value), err.value
    assert str(root.name) in str(err.value) or "manifest" in str(err.value) or "tile" in str(err.value)


def test_manifest_roundtrip_and_validation():
    text = (CONFORMANCE / "datasets" / "v2_with_obs" / "manifest.json").read_text()
    m = deltacells.Manifest.from_json(text)
    assert deltacells.Manifest.from_json(m.to_json()) == m
    d = json.loads(text)
    for mutate, key in [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(version=99), "version"),
        (lambda d: d.update(n_cells=d["n_cells"] + 1), "n_cells"),
        (lambda d: d["tile_nnz"].pop(), "tile_nnz"),
        (lambda d: d.update(obs_fingerprint=""), "obs_fingerprint"),
    ]:
        bad = json.loads(json.dumps(d))
        mutate(bad)
        with pytest.raises(FormatError, match=key):
            deltacells.Manifest.from_json(json.dumps(bad))
    extra = json.loads(json.dumps(d))
    extra["produced_by_future_writer"] = {"x": 1}
    assert deltacells.Manifest.from_json(json.dumps(extra)).extra == {"produced_by_future_writer": {"x": 1}}
