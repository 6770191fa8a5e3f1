"""Obs and var from Python: schema inference and encoding, shards written by DatasetWriter, lookups against the
source frame, the node cache (ranged reads only), pandas round trips."""

import json
import multiprocessing
import os
import pickle
import shutil
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import forget_side_file_digests, make_counts, require

pd = require("pandas")
pa = require("pyarrow")
pq = require("pyarrow.parquet")

import deltacells  # noqa: E402
from deltacells import CountingBackend, DatasetWriter, LocalBackend, Manifest, RangeFile, open_dataset  # noqa: E402
from deltacells.obs import DEFAULT_MAX_CATEGORIES, ColumnSpec, ObsSchema, resolve_cache_dir  # noqa: E402

N, TILE, PER_FILE = 350, 100, 2  # 4 tiles, 2 shards


def make_obs(n, seed=0):
    rng = np.random.default_rng(seed)
    cell_type = rng.choice(np.array(["alpha", "beta", "gamma", None], dtype=object), n, p=[0.4, 0.3, 0.2, 0.1])
    return pd.DataFrame(
        {
            "cell_type": pd.Categorical(cell_type),
            "donor": pd.Categorical(rng.choice([f"d{i}" for i in range(7)], n)),
            "n_counts": rng.integers(0, 10**6, n).astype(np.int64),
            "age": np.where(rng.random(n) < 0.1, np.nan, rng.normal(50, 10, n)),
            "doublet": rng.random(n) < 0.2,
            "barcode": [f"BC{rng.integers(1 << 40):x}" for _ in range(n)],
            "sex": pd.array(rng.choice(["F", "M", None], n), dtype="string"),
        }
    )


def make_var(n_genes):
    return pd.DataFrame(
        {
            "gene_name": [f"name{i % 11}" for i in range(n_genes)],
            "gene_id": pd.array([f"ENS{i:05d}" for i in range(n_genes)], dtype="string"),
            "gene_version": np.arange(n_genes, dtype=np.float64),
        },
        index=pd.Index([f"g{i}" for i in range(n_genes)], name="var_id"),
    )


def expected_column(obs, name, idx):
    s = obs[name].iloc[idx]
    if isinstance(s.dtype, pd.CategoricalDtype):
        vocab = list(obs[name].cat.categories)
        return np.array([-1 if pd.isna(v) else vocab.index(v) for v in s])
    return s.to_numpy()


def assert_column_equal(got, want, name):
    if want.dtype == object or got.dtype == object:
        norm = lambda xs: [None if pd.isna(v) else v for v in xs]  # noqa: E731
        assert norm(got) == norm(want), name
    elif np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=name)
    else:
        assert np.array_equal(got, want), name


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("obsds") / "ds")
    full = make_counts(N, 30, density=0.2, seed=100)
    obs, var = make_obs(N), make_var(30)
    order = np.random.default_rng(1).permutation(30)
    schema = ObsSchema.infer([obs])
    with DatasetWriter(
        root, n_genes=30, tile_size=TILE, gene_order=order, var=var, obs_schema=schema, obs_tiles_per_file=PER_FILE,
        level=3, n_chunks=2,
    ) as w:
        for lo in range(0, N, TILE):
            w.add_tile(full[lo : lo + TILE], obs=obs.iloc[lo : lo + TILE])
    return root, full, obs, var, order, schema


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def test_infer_kinds_vocabularies_and_json_roundtrip():
    schema = ObsSchema.infer([make_obs(50)])
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds == {"cell_type": "category", "donor": "category", "n_counts": "numeric", "age": "numeric",
                     "doublet": "bool", "barcode": "string", "sex": "string"}
    assert schema["cell_type"].categories == ["alpha", "beta", "gamma"] and schema["cell_type"].arrow_type == "int8"
    assert schema["n_counts"].arrow_type == "int64" and schema["age"].arrow_type == "double"
    again = ObsSchema.from_json(schema.to_json())
    assert [c.__dict__ for c in again.columns] == [c.__dict__ for c in schema.columns] and again == schema
    assert schema.arrow_schema().names == schema.names and schema.names[0] == "cell_type"
    doc = json.loads(schema.to_json())
    assert doc["format"] == "deltacells-obs" and doc["version"] == 1
    # One frame, not in a list, is a list of one.
    assert ObsSchema.infer(make_obs(50)) == schema


def test_vocabulary_is_the_union_across_frames_in_order_of_appearance():
    a = pd.DataFrame({"x": pd.Categorical(["b", "a", "b"], categories=["b", "a"])})
    b = pd.DataFrame({"x": pd.Categorical(["c", "a"], categories=["c", "a", "d"])})
    schema = ObsSchema.infer([a, b])
    assert schema["x"].categories == ["b", "a", "c", "d"]
    assert schema.encode(b).column("x").to_pylist() == [2, 1]


def test_high_cardinality_and_code_widths():
    big = pd.DataFrame({"x": pd.Categorical([f"v{i}" for i in range(30)]), "y": pd.Categorical(["a", "b"] * 15)})
    assert ObsSchema.infer([big], max_categories=29)["x"].kind == "string"
    assert ObsSchema.infer([big], max_categories=30)["x"].kind == "category"
    assert ObsSchema.infer([big], max_categories=29)["y"].kind == "category"
    assert DEFAULT_MAX_CATEGORIES == 20_000 and ObsSchema.infer([big])["x"].kind == "category"
    frames = [pd.DataFrame({"x": pd.Categorical([f"s{k}_{i}" for i in range(10)])}) for k in range(5)]
    assert ObsSchema.infer(frames, max_categories=40)["x"].kind == "string"
    assert ObsSchema.infer(frames, max_categories=50)["x"].kind == "category"
    s = ObsSchema.infer([pd.DataFrame({"x": pd.Categorical([str(i) for i in range(200)])})])
    assert s["x"].arrow_type == "int16"
    s = ObsSchema.infer([pd.DataFrame({"x": pd.Categorical([str(i) for i in range(40_000)])})], max_categories=50_000)
    assert s["x"].arrow_type == "int32"


def test_infer_selects_excludes_and_merges_numbers():
    obs = make_obs(20)
    assert ObsSchema.infer([obs], exclude=["barcode", "sex"]).names == [
        "cell_type", "donor", "n_counts", "age", "doublet"
    ]
    assert ObsSchema.infer([obs], columns=["age", "donor"]).names == ["age", "donor"]
    a, b = pd.DataFrame({"x": np.array([1, 2], np.int16)}), pd.DataFrame({"x": np.array([1.5], np.float32)})
    assert ObsSchema.infer([a, b])["x"].pa_type() == pa.float32() == ObsSchema.infer([b, a])["x"].pa_type()


def test_booleans_with_gaps_and_columns_missing_in_a_frame_keep_their_kind(tmp_path, cache):
    # pandas holds booleans with gaps as objects; a frame with no value in a column has objects of no kind.
    a = pd.DataFrame({"flag": [True, None, False], "n": [None] * 3, "label": [None] * 3, "ct": [None] * 3})
    b = pd.DataFrame({"flag": [None, True], "n": np.array([7, 9], np.int16), "label": ["u", "v"],
                      "ct": pd.Categorical(["p", "q"])})
    schema = ObsSchema.infer([a, b])
    assert {c.name: (c.kind, c.arrow_type) for c in schema.columns} == {
        "flag": ("bool", "bool"), "n": ("numeric", "int16"), "label": ("string", "string"), "ct": ("category", "int8")
    }
    assert ObsSchema.infer([b, a]) == schema
    assert ObsSchema.infer(a)["n"].kind == "string"  # no frame has a value: nothing says otherwise
    full = make_counts(5, 4, seed=8)
    root = str(tmp_path / "gaps")
    with DatasetWriter(root, n_genes=4, tile_size=3, level=3, obs_schema=schema) as w:
        w.add_tile(full[:3], obs=a)
        w.add_tile(full[3:], obs=b)
    got = open_dataset(root, cache_dir=cache).obs.take(np.arange(5), schema.names, warn=False)
    assert list(got["flag"]) == [True, None, False, None, True]
    assert all(type(v) is bool for v in got["flag"] if v is not None)
    np.testing.assert_array_equal(got["n"], [np.nan, np.nan, np.nan, 7, 9])
    assert list(got["label"]) == [None, None, None, "u", "v"]
    assert [None if c < 0 else schema["ct"].categories[c] for c in got["ct"]] == [None, None, None, "p", "q"]


def test_infer_errors():
    with pytest.raises(ValueError, match="no obs frames"):
        ObsSchema.infer([])
    with pytest.raises(ValueError, match="in some frames"):
        ObsSchema.infer([pd.DataFrame({"x": ["a"]}), pd.DataFrame({"x": [1.0]})])
    with pytest.raises(ValueError, match="different columns"):
        ObsSchema.infer([pd.DataFrame({"x": [1]}), pd.DataFrame({"y": [1]})])
    with pytest.raises(ValueError, match="unsupported dtype"):
        ObsSchema.infer([pd.DataFrame({"t": pd.to_datetime(["2020-01-01"])})])
    with pytest.raises(ValueError, match="lacks columns"):
        ObsSchema.infer([pd.DataFrame({"x": [1]}), pd.DataFrame({"y": [1]})], columns=["x"])


def test_encode_missing_values_unknown_values_and_column_mismatch():
    obs = make_obs(60)
    schema = ObsSchema.infer([obs])
    t = schema.encode(obs)
    assert t.num_rows == 60 and t.schema.equals(schema.arrow_schema())
    codes = np.array(t.column("cell_type").to_pylist())
    assert ((codes == -1) == obs["cell_type"].isna().to_numpy()).all()
    assert t.column("age").null_count == int(obs["age"].isna().sum())
    as_strings = obs.assign(cell_type=obs["cell_type"].astype(object))
    assert schema.encode(as_strings).column("cell_type").to_pylist() == t.column("cell_type").to_pylist()
    with pytest.raises(ValueError, match="vocabulary"):
        schema.encode(obs.assign(donor=pd.Categorical(["unseen"] * 60)))
    with pytest.raises(ValueError, match="vocabulary"):
        schema.encode(obs.assign(cell_type=["zzz"] * 60))
    with pytest.raises(ValueError, match="missing"):
        schema.encode(obs.drop(columns=["age"]))
    with pytest.raises(ValueError, match="unexpected"):
        schema.encode(obs.assign(extra=1))


def test_schema_constructor_validation():
    with pytest.raises(ValueError, match="duplicate"):
        ObsSchema([ColumnSpec("a", "numeric", "int64"), ColumnSpec("a", "numeric", "int64")])
    with pytest.raises(ValueError, match="unknown column kind"):
        ObsSchema([ColumnSpec("a", "weird", "int64")])
    with pytest.raises(ValueError, match="categories"):
        ObsSchema([ColumnSpec("a", "category", "int8")])
    with pytest.raises(KeyError, match="available"):
        ObsSchema([ColumnSpec("a", "numeric", "int64")])["b"]
    with pytest.raises(ValueError, match="not a deltacells obs schema"):
        ObsSchema.from_json(json.dumps({"format": "other"}))


def test_a_schema_iterates_and_counts_its_column_names_as_a_mapping_does():
    obs = pd.DataFrame({"b": [1.0, 2.0], "a": pd.Categorical(["x", "y"]), "c": ["p", "q"]})
    schema = ObsSchema.infer(obs)
    assert list(schema) == schema.names == ["b", "a", "c"] and len(schema) == 3
    assert {name: schema[name].kind for name in schema} == {"b": "numeric", "a": "category", "c": "string"}
    assert len(ObsSchema([])) == 0 and list(ObsSchema([])) == []


def test_columns_of_no_value_in_a_frame_take_the_kind_the_other_frames_give():
    """A float column of NaN (how pandas and anndata hold an empty column), all-NA nullable numbers or strings:
    no kind of their own, whatever their dtype; the stored values are missing."""
    full = pd.DataFrame({"donor": ["d1", "d2"], "n": [1, 2]})
    for empty in (pd.DataFrame({"donor": [np.nan, np.nan], "n": pd.array([None, None], dtype="Int64")}),
                  pd.DataFrame({"donor": pd.array([None, None], dtype="Float64"), "n": [np.nan, np.nan]})):
        for frames in ([full, empty], [empty, full]):
            schema = ObsSchema.infer(frames)
            assert (schema["donor"].kind, schema["n"].kind) == ("string", "numeric")
            stored = schema.encode(empty)
            assert stored.column("donor").null_count == 2 and stored.column("n").null_count == 2


def test_values_a_column_cannot_hold_are_refused_naming_it_not_turned_into_text():
    """As anndata refuses to write them: numbers, dates or lists in an object column, values of another kind for a
    string or bool column, column names that are not strings or that repeat."""
    for values in ([1, None, 3], [[1], [2], None], [pd.Timestamp("2020-01-01"), None, pd.Timestamp("2021-01-01")]):
        with pytest.raises(ValueError, match="obs column 'x' is an object column of .* not strings"):
            ObsSchema.infer(pd.DataFrame({"x": pd.Series(values, dtype=object)}))
    schema = ObsSchema.infer(pd.DataFrame({"s": ["a", "b"], "b": [True, False]}))
    with pytest.raises(ValueError, match="obs column 's' is a string column in the schema but holds numeric"):
        schema.encode(pd.DataFrame({"s": [7, 8.5], "b": [True, False]}))
    with pytest.raises(ValueError, match="obs column 'b' is a bool column in the schema but holds numeric"):
        schema.encode(pd.DataFrame({"s": ["a", "b"], "b": [2, 0]}))
    with pytest.raises(ValueError, match="must be strings, not \\[0\\]"):
        ObsSchema.infer(pd.DataFrame({0: [1.0], "a": [2.0]}))
    twice = pd.DataFrame([[1.0, 2.0]], columns=["a", "a"])
    with pytest.raises(ValueError, match="'a'.* more than once"):
        ObsSchema.infer(twice)
    with pytest.raises(ValueError, match="'a'.* more than once"):
        ObsSchema.infer(pd.DataFrame({"a": [1.0]})).encode(twice)


def test_verify_finds_gene_names_and_a_gene_table_of_one_set_in_two_orders(tmp_path, capsys):
    """A ``var_names.txt`` copied from a dataset of the same genes in another order would put counts under the
    wrong names: verify says so (names of another kind, symbols against IDs, are left alone)."""
    from deltacells.cli import main

    var = make_var(6)
    root = tmp_path / "ds"
    with DatasetWriter(str(root), n_genes=6, tile_size=10, level=3, var=var, var_names=list(var.index)) as w:
        w.add_tile(make_counts(4, 6, seed=2))
    assert main(["verify", str(root)]) == 0
    (root / "var_names.txt").write_text("\n".join(reversed(list(var.index))) + "\n")
    capsys.readouterr()
    assert main(["verify", str(root)]) == 1
    assert "var_names.txt: its SHA-256 is" in capsys.readouterr().out, "the digest the manifest records"
    # Without digests (the original package records none), the two files are held against each other.
    forget_side_file_digests(root)
    assert main(["verify", str(root)]) == 1
    assert "holds the genes of var_names.txt in another order" in capsys.readouterr().out
    (root / "var_names.txt").write_text("\n".join(f"SYM{i}" for i in range(6)) + "\n")
    assert main(["verify", str(root)]) == 0


def test_gene_tables_keep_what_they_always_stored_and_unselected_columns_are_not_checked(tmp_path):
    """A gene table's object column of mixed values is stored as text, as it always was; columns with no value
    keep their dtype (float32, Int64); obs columns left out of a schema are not looked at."""
    var = make_var(4)
    var["chrom"] = np.array([1, "X", 2, None], dtype=object)
    var["empty32"] = np.full(4, np.nan, dtype=np.float32)
    var["empty_int"] = pd.array([None] * 4, dtype="Int64")
    root = str(tmp_path / "ds")
    with DatasetWriter(root, n_genes=4, tile_size=10, level=3, var=var) as w:
        w.add_tile(make_counts(3, 4, seed=1))
    got = open_dataset(root).var
    assert got["chrom"].tolist()[:3] == ["1", "X", "2"] and pd.isna(got["chrom"].iloc[3])
    assert got["empty32"].dtype == np.float32 and got["empty32"].isna().all()
    assert got["empty_int"].isna().all()
    frame = pd.DataFrame([[1.0, 2.0, 3.0]], columns=[0, "a", "a"])
    with pytest.raises(ValueError, match="must be strings"):
        ObsSchema.infer(frame, columns=[0])
    assert ObsSchema.infer(pd.DataFrame([[1.0, 2.0]], columns=[0, "b"]), exclude=[0]).names == ["b"]
    assert ObsSchema.infer(frame.iloc[:, :1].assign(b=1.0), columns=["b"]).names == ["b"]


def test_shards_row_groups_manifest(built):
    root, *_ = built
    m = Manifest.from_json(Path(root, "manifest.json").read_text())
    assert m.has_obs and m.obs_tiles_per_file == PER_FILE and m.n_obs_shards == 2 and m.has_var_table
    assert len(m.obs_shard_bytes) == len(m.obs_shard_sha256) == 2 and len(m.obs_fingerprint) == 24
    assert list(m.obs_shard_tiles(1)) == [2, 3]
    for s in range(2):
        path = os.path.join(root, m.obs_shard_name(s))
        assert os.path.getsize(path) == m.obs_shard_bytes[s]
        md = pq.read_metadata(path)
        assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [
            m.tile_cells[t] for t in m.obs_shard_tiles(s)
        ]
        assert not md.row_group(0).column(0).is_stats_set and md.row_group(0).column(0).compression == "ZSTD"
    assert json.loads(Path(root, "obs", "schema.json").read_text())["format"] == "deltacells-obs"


def test_obs_is_deterministic(tmp_path):
    obs, full = make_obs(120, seed=3), make_counts(120, 20, seed=3)
    schema = ObsSchema.infer([obs])
    fps = []
    for name in ("a", "b"):
        with DatasetWriter(str(tmp_path / name), n_genes=20, tile_size=60, level=3, obs_schema=schema) as w:
            w.add_tile(full[:60], obs=obs.iloc[:60])
            w.add_tile(full[60:], obs=obs.iloc[60:])
        fps.append(json.loads((tmp_path / name / "manifest.json").read_text())["obs_fingerprint"])
    assert fps[0] == fps[1]


def test_writer_obs_argument_rules(tmp_path):
    obs, full = make_obs(40), make_counts(40, 10, seed=4)
    schema = ObsSchema.infer([obs])
    w = DatasetWriter(str(tmp_path / "a"), n_genes=10, tile_size=40, level=3, obs_schema=schema)
    with pytest.raises(ValueError, match="obs must be given"):
        w.add_tile(full)
    with pytest.raises(ValueError, match="40 cells"):
        w.add_tile(full, obs=obs.iloc[:30])
    with pytest.raises(ValueError, match="missing"):
        w.add_tile(full, obs=obs.drop(columns=["age"]))
    assert not (tmp_path / "a" / "tiles" / "tile_000000.dct").exists(), "nothing is written for a refused tile"
    w.add_tile(full, obs=obs)
    w.close()
    plain = DatasetWriter(str(tmp_path / "b"), n_genes=10, tile_size=40, level=3)
    with pytest.raises(ValueError, match="obs must be given"):
        plain.add_tile(full, obs=obs)
    with pytest.raises(ValueError, match="var must have"):
        DatasetWriter(str(tmp_path / "c"), n_genes=10, tile_size=40, var=make_var(9))


def test_writer_accepts_an_already_encoded_table(tmp_path):
    obs, full = make_obs(40), make_counts(40, 10, seed=5)
    schema = ObsSchema.infer([obs])
    with DatasetWriter(str(tmp_path / "d"), n_genes=10, tile_size=40, level=3, obs_schema=schema) as w:
        w.add_tile(full, obs=schema.encode(obs))
    ds = open_dataset(str(tmp_path / "d"), cache_dir=str(tmp_path / "c"), obs_columns=["age"])
    got = ds.obs.take(np.arange(40), ds.obs.columns, warn=False)
    for name in ds.obs.columns:
        assert_column_equal(got[name], expected_column(obs, name, np.arange(40)), name)


def test_verify_passes_and_detects_tampering(built, tmp_path):
    root, *_ = built
    open_dataset(root).obs.verify()
    bad = str(tmp_path / "bad")
    shutil.copytree(root, bad)
    path = os.path.join(bad, "obs", "obs_0001.parquet")
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        open_dataset(bad).obs.verify()
    os.remove(path)
    with pytest.raises(FileNotFoundError):
        open_dataset(bad).obs.verify()


def test_take_matches_ground_truth_for_every_kind(built, cache):
    root, _, obs, *_ = built
    ds = open_dataset(root, cache_dir=cache)
    ds.obs.localize()
    rng = np.random.default_rng(7)
    for _ in range(10):
        idx = rng.integers(0, N, int(rng.integers(1, 120)))
        got = ds.obs.take(idx, ds.obs.columns)
        assert list(got) == ds.obs.columns
        for name in ds.obs.columns:
            assert_column_equal(got[name], expected_column(obs, name, idx), name)
    assert got["cell_type"].dtype == np.int8 and got["n_counts"].dtype == np.int64 and got["doublet"].dtype == bool


def test_threads_taking_obs_at_once_while_another_closes_it_get_every_value(built, cache):
    """Threads making their first ``take`` on a new handle at once, and reads while another thread closes the obs,
    all get the values: each read keeps the reader it mapped the columns in."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    root, _, obs, *_ = built
    open_dataset(root, cache_dir=cache).obs.localize(["cell_type", "n_counts"])  # in the cache, not mapped yet
    idx = np.arange(5, 60, 4)
    want = {name: expected_column(obs, name, idx) for name in ("cell_type", "n_counts")}

    def check(got):
        for name, values in want.items():
            assert_column_equal(got[name], values, name)

    for _ in range(15):
        ds = open_dataset(root, cache_dir=cache)
        start = threading.Barrier(6)

        def first_take(ds=ds, start=start):
            start.wait()
            return ds.obs.take(idx, ["cell_type", "n_counts"], warn=False)

        with ThreadPoolExecutor(6) as pool:
            for got in [f.result() for f in [pool.submit(first_take) for _ in range(6)]]:
                check(got)
    ds = open_dataset(root, cache_dir=cache)
    stop = threading.Event()

    def close_again_and_again():
        while not stop.is_set():
            ds.obs.close()

    closer = threading.Thread(target=close_again_and_again)
    closer.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            for got in pool.map(lambda _: ds.obs.take(idx, ["cell_type", "n_counts"], warn=False), range(400)):
                check(got)
    finally:
        stop.set()
        closer.join()


def test_numbers_and_codes_reach_numpy_without_a_copy(built, cache, tmp_path):
    """Numbers without missing values and category codes come as the vectors the Rust reader built, handed to
    numpy (which owns no copy of its own; that they are handed over whole is checked in dct-obs); they are writable
    and never alias the cache, which a later read shows; a one-tile column, which Arrow hands back as the cache's
    own view, is copied into an array numpy owns."""
    root, full, obs, *_ = built
    store = open_dataset(root, cache_dir=cache).obs
    columns = ["n_counts", "donor"]
    store.localize(columns)
    idx = np.array([349, 0, 120, 120, 7])
    taken = store.take(idx, columns)
    whole = store._r().table(columns)  # what to_pandas builds its frame from
    for name in columns:
        for got, cells in ((taken[name], idx), (whole[name], np.arange(N))):
            assert not got.flags.owndata and got.base is not None, name
            assert_column_equal(got, expected_column(obs, name, cells), name)
            got[:] = 0
    again = store.take(idx, columns)
    for name in columns:
        assert_column_equal(again[name], expected_column(obs, name, idx), name)

    one = str(tmp_path / "one")
    with DatasetWriter(one, n_genes=30, tile_size=TILE, obs_schema=ObsSchema.infer([obs]), level=3) as w:
        w.add_tile(full[:TILE], obs=obs.iloc[:TILE])
    single = open_dataset(one, cache_dir=cache).obs
    single.localize(["n_counts"])
    first = single._r().table(["n_counts"])["n_counts"]
    assert first.flags.owndata and first.flags.writeable
    first[:] = -1
    assert_column_equal(single._r().table(["n_counts"])["n_counts"], obs["n_counts"].to_numpy()[:TILE], "n_counts")


def test_take_basics(built, cache):
    root, _, obs, *_ = built
    store = open_dataset(root, cache_dir=cache).obs
    store.localize(["age", "cell_type"])
    assert store.take([], ["age"])["age"].shape == (0,)
    assert_column_equal(store.take([5], "age")["age"], obs["age"].to_numpy()[[5]], "age")
    with pytest.raises(KeyError, match="unknown obs columns"):
        store.take([1], ["nope"])
    for bad, cell, position in (([-1], -1, 0), ([N], N, 0), ([0, 10**6], 10**6, 1)):
        want = rf"cell {cell} \(position {position} of the request\) is out of range: there are {N} cells"
        with pytest.raises(IndexError, match=want):
            store.take(bad, ["age"])
    assert store.kind("cell_type") == "category" and store.categories("cell_type") == ["alpha", "beta", "gamma"]
    with pytest.raises(ValueError, match="not categorical"):
        store.categories("age")
    assert "age" in store.localized_columns() and "donor" not in store.localized_columns()


def test_on_demand_fetch_warns_once(built, cache):
    root, _, obs, *_ = built
    store = open_dataset(root, cache_dir=cache).obs
    with pytest.warns(UserWarning, match="not in the local cache"):
        got = store.take([1, 2, 3], ["donor"])
    assert np.array_equal(got["donor"], expected_column(obs, "donor", [1, 2, 3]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.take([1, 2, 3], ["donor"])
        open_dataset(root, cache_dir=cache).obs.take([4], ["donor"])  # cached on disk: no warning either
        open_dataset(root, cache_dir=cache).obs.take([4], ["cell_type"], warn=False)


def test_to_pandas_and_take_pandas(built, cache):
    root, _, obs, *_ = built
    store = open_dataset(root, cache_dir=cache).obs
    df = store.to_pandas(["cell_type", "age", "barcode", "sex", "doublet"])
    assert len(df) == N and isinstance(df.index, pd.RangeIndex)
    assert isinstance(df["cell_type"].dtype, pd.CategoricalDtype)
    assert list(df["cell_type"].cat.categories) == ["alpha", "beta", "gamma"]
    assert df["cell_type"].isna().equals(obs["cell_type"].isna())
    assert (df["cell_type"].dropna().astype(str) == obs["cell_type"].dropna().astype(str)).all()
    assert_column_equal(df["age"].to_numpy(), obs["age"].to_numpy(), "age")
    assert list(df["barcode"]) == list(obs["barcode"]) and df["doublet"].tolist() == obs["doublet"].tolist()
    assert [None if pd.isna(v) else v for v in df["sex"]] == [None if pd.isna(v) else v for v in obs["sex"]]
    # Labels as pandas holds strings: object before pandas 3, its string dtype since.
    labels = store.to_pandas(["cell_type"], categorical=False)["cell_type"]
    assert labels.dtype == pd.Series(["a", None]).dtype
    assert [None if pd.isna(v) else v for v in labels] == [None if pd.isna(v) else v for v in obs["cell_type"]]
    assert list(store.to_pandas().columns) == obs.columns.tolist()
    tp = store.take_pandas([3, 1], ["donor", "age"])
    assert list(tp.columns) == ["donor", "age"] and list(tp["donor"].cat.categories) == [f"d{i}" for i in range(7)]


def test_dataset_obs_columns_argument_and_absent_obs(built, cache, tmp_path):
    root, *_ = built
    ds = open_dataset(root, cache_dir=cache, obs_columns=["age", "donor"])
    assert sorted(ds.obs.localized_columns()) == ["age", "donor"]
    with pytest.raises(KeyError):
        open_dataset(root, cache_dir=cache, obs_columns=["nope"])
    with DatasetWriter(str(tmp_path / "plain"), n_genes=10, tile_size=20, level=3) as w:
        w.add_tile(make_counts(20, 10, seed=6))
    plain = open_dataset(str(tmp_path / "plain"))
    assert plain.obs is None and plain.var is None
    with pytest.raises(ValueError, match="no obs"):
        open_dataset(str(tmp_path / "plain"), obs_columns=["a"])


def test_pickling_a_dataset_with_obs(built, cache):
    root, _, obs, *_ = built
    ds = open_dataset(root, cache_dir=cache, obs_columns=["age"])
    ds.obs.take([1], ["age"])
    assert ds.obs._readers
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.cache_dir == cache and not clone.obs._readers
    assert_column_equal(clone.obs.take([5, 6], ["age"])["age"], obs["age"].to_numpy()[[5, 6]], "age")
    ds.close()
    assert not ds.obs._readers


def test_var_table_roundtrip(built):
    root, _, _, var, order, _ = built
    got = open_dataset(root).var
    want = var.iloc[order]
    assert got.index.name == "var_id" and list(got.index) == [f"g{j}" for j in order]
    assert list(got.columns) == list(want.columns)
    assert got["gene_name"].tolist() == want["gene_name"].tolist()
    assert got["gene_id"].tolist() == want["gene_id"].tolist()
    assert np.array_equal(got["gene_version"].to_numpy(), want["gene_version"].to_numpy())
    ds = open_dataset(root)
    assert ds.var is ds.var


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("wide") / "ds")
    n, tile = 12_000, 2_000
    rng = np.random.default_rng(11)
    obs = pd.DataFrame({f"f{i:02d}": rng.normal(size=n) for i in range(30)})
    obs["cell_type"] = pd.Categorical(rng.choice(list("abcde"), n))
    obs["donor"] = pd.Categorical(rng.choice([f"d{i}" for i in range(50)], n))
    full = make_counts(n, 10, density=0.05, seed=11)
    schema = ObsSchema.infer([obs])
    with DatasetWriter(
        root, n_genes=10, tile_size=tile, level=3, n_chunks=1, obs_schema=schema, obs_tiles_per_file=3
    ) as w:
        for lo in range(0, n, tile):
            w.add_tile(full[lo : lo + tile], obs=obs.iloc[lo : lo + tile])
    return root, obs


def test_localizing_reads_only_the_requested_columns_with_ranged_reads(wide, cache):
    root, obs = wide
    backend = CountingBackend(LocalBackend(root))
    ds = open_dataset(backend, cache_dir=cache)
    total_obs = sum(ds.manifest.obs_shard_bytes)
    store = ds.obs
    sizes = store.column_nbytes()
    assert sizes["cell_type"] < 0.01 * total_obs < sizes["f00"]
    store.columns  # noqa: B018  (reads the schema)
    backend.reset()
    assert store.localize(["cell_type"]) == ["cell_type"]
    assert backend.bytes_read < 0.15 * total_obs, f"read {backend.bytes_read} of {total_obs} obs bytes"
    assert backend.n_reads == 0 and backend.n_range_reads > 0, "obs shards are only read with ranged reads"
    first = backend.bytes_read
    backend.reset()
    assert store.localize(["f03"]) == ["f03"]
    assert backend.bytes_read < 0.1 * total_obs + sizes["f03"] + first and backend.n_reads == 0
    backend.reset()
    assert store.localize(["cell_type", "f03"]) == []
    assert backend.bytes_read == 0 and backend.n_range_reads == 0
    got = store.take(np.arange(0, 12_000, 7), ["cell_type", "f03"])
    assert np.array_equal(got["cell_type"], expected_column(obs, "cell_type", np.arange(0, 12_000, 7)))
    assert np.array_equal(got["f03"], obs["f03"].to_numpy()[::7])
    assert backend.bytes_read == 0, "lookups after localizing never touch the dataset"


def test_localize_is_additive(wide, cache):
    root, _ = wide
    store = open_dataset(root, cache_dir=cache).obs
    store.localize(["donor"])
    path = store._path("donor")
    stat = (path.stat().st_mtime_ns, path.stat().st_size)
    store.localize(["f01", "f02"])
    assert (path.stat().st_mtime_ns, path.stat().st_size) == stat
    assert sorted(store.localized_columns()) == ["donor", "f01", "f02"]
    assert not [p for p in store.cache_dir.iterdir() if ".tmp" in p.name]


def test_cache_location_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("DELTACELLS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_cache_dir() == tmp_path / "home" / ".cache" / "deltacells"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_cache_dir() == tmp_path / "xdg" / "deltacells"
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    assert resolve_cache_dir(str(tmp_path / "arg")) == tmp_path / "arg"


def test_caches_are_keyed_by_dataset_content(tmp_path, cache):
    obs, full = make_obs(40, seed=1), make_counts(40, 10, seed=1)
    other = obs.assign(age=obs["age"] + 1)
    roots = []
    for name, df in (("a", obs), ("b", other)):
        with DatasetWriter(
            str(tmp_path / name), n_genes=10, tile_size=40, level=3, obs_schema=ObsSchema.infer([df])
        ) as w:
            w.add_tile(full, obs=df)
        roots.append(str(tmp_path / name))
    a, b = (open_dataset(r, cache_dir=cache).obs for r in roots)
    assert a.cache_dir != b.cache_dir
    a.localize(["age"])
    b.localize(["age"])
    assert_column_equal(a.take([0, 1], "age")["age"], obs["age"].to_numpy()[:2], "age")
    assert_column_equal(b.take([0, 1], "age")["age"], other["age"].to_numpy()[:2], "age")
    shutil.copytree(roots[0], str(tmp_path / "a_copy"))
    again = CountingBackend(LocalBackend(str(tmp_path / "a_copy")))
    store = open_dataset(again, cache_dir=cache).obs
    store.columns  # noqa: B018
    again.reset()
    assert store.localize(["age"]) == [] and again.bytes_read == 0


def _localize_in_process(root, cache, columns):
    from deltacells import open_dataset as _open

    return _open(root, cache_dir=cache).obs.localize(columns)


def test_concurrent_processes_fetch_each_column_once(wide, cache):
    root, obs = wide
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        futures = [pool.submit(_localize_in_process, root, cache, ["f07", "cell_type"]) for _ in range(4)]
        fetched = [f.result() for f in futures]
    assert sum(bool(f) for f in fetched) == 1, f"exactly one process should do the work, got {fetched}"
    store = open_dataset(root, cache_dir=cache).obs
    assert sorted(store.localized_columns()) == ["cell_type", "f07"]
    assert np.array_equal(store.take([10, 11999], ["f07"])["f07"], obs["f07"].to_numpy()[[10, 11999]])


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage"])
def test_a_corrupt_cache_file_is_detected_and_rebuilt(built, cache, damage):
    root, _, obs, *_ = built
    store = open_dataset(root, cache_dir=cache).obs
    store.localize(["age"])
    path = store._path("age")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "empty": b"", "garbage": b"not an arrow file" * 100}[damage])
    store.close()
    assert_column_equal(store.take([1, 2, 3], ["age"], warn=False)["age"], obs["age"].to_numpy()[[1, 2, 3]], "age")


def test_parquet_through_a_range_file(built):
    root, *_ = built
    counting = CountingBackend(LocalBackend(root))
    name = "obs/obs_0000.parquet"
    md = pq.read_metadata(RangeFile(counting, name))
    assert md.num_row_groups == 2 and md.num_columns == 7
    got = pq.ParquetFile(RangeFile(counting, name), metadata=md, pre_buffer=True).read_row_group(
        1, columns=["n_counts"]
    )
    assert got.num_rows == 100 and got.column_names == ["n_counts"] and counting.n_reads == 0


def test_var_keeps_categorical_columns_and_is_read_once(tmp_path):
    """As the original's ``ds.var``: categorical gene-table columns come back categorical with the categories
    written, in their order, unused ones and ``ordered`` included (pyarrow, reading the file on its own, sees the
    labels the genes use, which is what parquet stores); the table is read once (still there after
    ``var.parquet`` is gone)."""
    var = make_var(12)
    var["feature_types"] = pd.Categorical(["Gene Expression"] * 10 + [None, "Antibody Capture"],
                                          categories=["Unused", "Gene Expression", "Antibody Capture"])
    var["level"] = pd.Categorical(["high", "low"] * 6, categories=["low", "mid", "high"], ordered=True)
    var["score"] = np.array([np.nan] + [1.5] * 11, dtype=np.float32)
    root = str(tmp_path / "ds")
    with DatasetWriter(root, n_genes=12, tile_size=10, level=3, var=var, var_names=list(var.index)) as w:
        w.add_tile(make_counts(10, 12, seed=3))
    by_pyarrow = pd.read_parquet(os.path.join(root, "var.parquet"))
    ds = open_dataset(root)
    got = ds.var
    for name in ("feature_types", "level"):
        assert got[name].dtype == var[name].dtype, name  # categories in order, and ordered
        assert got[name].cat.codes.tolist() == var[name].cat.codes.tolist(), name
        assert by_pyarrow[name].astype(str).tolist() == var[name].astype(str).tolist(), name
    assert by_pyarrow["level"].cat.ordered
    assert got["score"].dtype == by_pyarrow["score"].dtype == np.float32, "float32 with a gap stays float32"
    assert np.isnan(got["score"].iloc[0]) and (got["score"].iloc[1:] == 1.5).all()
    for frame in (got, by_pyarrow):
        assert frame.index.tolist() == var.index.tolist() and frame["gene_name"].tolist() == var["gene_name"].tolist()
    os.remove(os.path.join(root, "var.parquet"))
    assert ds.var is got


def test_a_gene_table_of_large_strings_as_pandas_3_writes_it_reads(tmp_path):
    """pyarrow writes pandas 3's strings as large strings, categoricals as dictionaries of them with 8-bit codes:
    ``ds.var`` reads such a table as pandas does (the table written by pyarrow itself, whatever pandas is here)."""
    import pyarrow.parquet as pq

    var = make_var(12)
    root = tmp_path / "ds"
    with DatasetWriter(str(root), n_genes=12, tile_size=10, level=3, var=var) as w:
        w.add_tile(make_counts(10, 12, seed=5))
    codes = pa.array([i % 3 for i in range(11)] + [None], pa.int8())
    kinds = pa.DictionaryArray.from_arrays(codes, pa.array(["c", "a", "b"], pa.large_string()), ordered=True)
    table = pa.table({"kind": kinds, "name": pa.array(var["gene_name"].tolist(), pa.large_string()),
                      "gene": pa.array(var.index.tolist(), pa.large_string())})
    meta = {"index_columns": ["gene"], "column_indexes": [], "columns": [
        {"name": "kind", "field_name": "kind", "pandas_type": "categorical", "numpy_type": "int8",
         "metadata": {"num_categories": 3, "ordered": True}},
        {"name": "name", "field_name": "name", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        {"name": "gene", "field_name": "gene", "pandas_type": "unicode", "numpy_type": "object", "metadata": None}]}
    pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(meta)}), root / "var.parquet")
    forget_side_file_digests(root)
    want = pd.read_parquet(root / "var.parquet")
    got = open_dataset(str(root)).var
    assert got.index.tolist() == want.index.tolist() == var.index.tolist() and got.index.name == "gene"
    assert got["name"].tolist() == want["name"].tolist()
    assert got["kind"].dtype == want["kind"].dtype == pd.CategoricalDtype(["c", "a", "b"], ordered=True)
    assert got["kind"].cat.codes.tolist() == want["kind"].cat.codes.tolist()


def test_a_gene_table_written_by_pandas_reads_and_a_wrong_one_is_named(tmp_path):
    """``var.parquet`` as pandas writes it (snappy, its default) reads as pandas reads it; one of another length,
    or with pandas metadata that is not JSON, is a FormatError naming the file, from ``ds.var`` and from verify."""
    from deltacells import FormatError
    from deltacells.cli import main

    var = make_var(20)
    root = tmp_path / "ds"
    with DatasetWriter(str(root), n_genes=20, tile_size=10, level=3, var=var) as w:
        w.add_tile(make_counts(10, 20, seed=4))
    # Tables put in place by other tools are read as in a dataset whose manifest records no digest of them (the
    # original package's); with one, a replaced table is refused first (test_the_gene_table_written_and_read_...).
    forget_side_file_digests(root)
    var.to_parquet(root / "var.parquet")  # snappy
    pd.testing.assert_frame_equal(open_dataset(str(root)).var, pd.read_parquet(root / "var.parquet"),
                                  check_dtype=False)
    assert main(["verify", str(root)]) == 0
    var.iloc[:19].to_parquet(root / "var.parquet")
    with pytest.raises(FormatError, match="var.parquet: holds 19 rows but the dataset has 20 genes"):
        open_dataset(str(root)).var  # noqa: B018
    assert main(["verify", str(root)]) == 1
    table = pa.Table.from_pandas(var).replace_schema_metadata({"pandas": "{not json"})
    import pyarrow.parquet as pq

    pq.write_table(table, root / "var.parquet")
    with pytest.raises(FormatError, match="var.parquet: its pandas metadata .* is not a JSON object"):
        open_dataset(str(root)).var  # noqa: B018


def test_a_column_with_a_long_name_is_localized_and_read(tmp_path, cache):
    """Column names whose quoted form passes a file name's 255 bytes (here 600) get a cache file name of their own
    (a cut name and a digest), so they localize and read like any other."""
    long_a, long_b = "\u00e9" * 100, "\u00e9" * 100 + "b"
    obs = pd.DataFrame({long_a: np.arange(6.0), long_b: pd.Categorical(list("xyxyxy")), "short": np.arange(6)})
    root = str(tmp_path / "ds")
    with DatasetWriter(root, n_genes=5, tile_size=3, level=3, obs_schema=ObsSchema.infer(obs)) as w:
        w.add_tile(make_counts(3, 5, seed=1), obs=obs.iloc[:3])
        w.add_tile(make_counts(3, 5, seed=2), obs=obs.iloc[3:])
    got = open_dataset(root, cache_dir=cache).obs.to_pandas()
    assert got[long_a].tolist() == obs[long_a].tolist() and got[long_b].astype(str).tolist() == list("xyxyxy")


def test_converted_var_keeps_the_input_s_categoricals(tmp_path):
    """The converter keeps an h5ad's categorical var columns categorical, with their categories in order (unused
    ones too) and ``ordered``: ``ds.var`` equals the source's var, read with anndata, in the dataset's gene order."""
    import anndata as ad
    from deltacells.convert import convert_h5ad

    x = make_counts(30, 12, seed=8)
    var = make_var(12).drop(columns=["gene_id"])  # anndata writes no pandas string arrays by default
    var["feature_types"] = pd.Categorical(["b", "a"] * 6, categories=["b", "a"])
    var["level"] = pd.Categorical(["hi", "lo", "lo"] * 4, categories=["lo", "mid", "hi"], ordered=True)
    src = tmp_path / "in.h5ad"
    ad.AnnData(X=x, var=var).write_h5ad(src)
    out = str(tmp_path / "ds")
    convert_h5ad(str(src), out, tile_size=16, level=3, log=None)
    want = ad.read_h5ad(src).var
    ds = open_dataset(out)
    order = ds.gene_order if ds.gene_order is not None else np.arange(12)
    got = ds.var
    for name in ("feature_types", "level"):
        assert got[name].dtype == want[name].dtype, name  # the categories in their order, and ordered
        assert got[name].tolist() == want[name].iloc[order].tolist(), name


def test_take_gives_missing_values_the_documented_types(tmp_path):
    """Numbers with missing values come as float64 with NaN, booleans with missing values as objects with None;
    without missing values, the stored dtype (against the DataFrame written)."""
    rng = np.random.default_rng(12)
    n = 90
    obs = pd.DataFrame({
        "counts": pd.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 500, n)), dtype="Int64"),
        "whole": rng.integers(-5, 5, n).astype(np.int32),
        "passed": pd.array(np.where(rng.random(n) < 0.2, None, rng.random(n) < 0.5), dtype="boolean"),
        "kept": rng.random(n) < 0.5,
    })
    root = str(tmp_path / "d")
    with DatasetWriter(root, n_genes=8, tile_size=40, level=3, obs_schema=ObsSchema.infer([obs])) as w:
        x = make_counts(n, 8, seed=13)
        for lo in range(0, n, 40):
            w.add_tile(x[lo : lo + 40], obs.iloc[lo : lo + 40].reset_index(drop=True))
    idx = rng.permutation(n)[:60]
    got = open_dataset(root, cache_dir=str(tmp_path / "c")).obs.take(idx, list(obs.columns), warn=False)
    want = obs.iloc[idx]
    assert got["counts"].dtype == np.float64
    np.testing.assert_array_equal(got["counts"], want["counts"].astype("float64").to_numpy(na_value=np.nan))
    assert got["whole"].dtype == np.int32 and np.array_equal(got["whole"], want["whole"].to_numpy())
    assert got["passed"].dtype == object
    assert list(got["passed"]) == [None if pd.isna(v) else bool(v) for v in want["passed"]]
    assert got["kept"].dtype == np.bool_ and np.array_equal(got["kept"], want["kept"].to_numpy())


def test_a_column_s_values_have_one_type_whichever_cells_are_taken(tmp_path):
    """A column with missing values in one tile only: every take (and a corpus's, and every loader batch) gives it
    the type the column's missing values call for, not the type of the cells that batch happens to hold."""
    first = pd.DataFrame({"n": pd.array([1, None, 3, 4], dtype="Int64"),
                          "f": np.array([1, np.nan, 2, 3], np.float32),
                          "b": pd.array([True, None, False, True], dtype="boolean"),
                          "whole": np.arange(4, dtype=np.int16)})
    second = pd.DataFrame({"n": pd.array([5, 6, 7, 8], dtype="Int64"), "f": np.arange(4, 8, dtype=np.float32),
                           "b": pd.array([True, False, False, True], dtype="boolean"),
                           "whole": np.arange(4, 8, dtype=np.int16)})
    root = str(tmp_path / "d")
    with DatasetWriter(root, n_genes=2, tile_size=4, obs_schema=ObsSchema.infer([first, second]),
                       var_names=["g0", "g1"]) as w:
        for frame in (first, second):
            w.add_tile(make_counts(4, 2, seed=3), obs=frame)
    cols = ["n", "f", "b", "whole"]
    store = open_dataset(root, cache_dir=str(tmp_path / "c")).obs
    with_missing, without = (store.take(cells, cols, warn=False) for cells in ([0, 1], [4, 5]))
    for c in cols:
        assert with_missing[c].dtype == without[c].dtype, c
    assert without["n"].dtype == np.float64 and list(without["n"]) == [5.0, 6.0]
    assert without["f"].dtype == np.float64 and without["b"].dtype == object and list(without["b"]) == [True, False]
    assert without["whole"].dtype == np.int16, "a column without missing values keeps its dtype"
    corpus = deltacells.open_corpus([root], cache_dir=str(tmp_path / "c"))
    for cells in ([0, 1], [4, 5]):
        got = corpus.obs.take(cells, cols, warn=False)
        assert {c: got[c].dtype for c in cols} == {c: with_missing[c].dtype for c in cols}
    torch = require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    batches = list(DeltaCellsIterableDataset(root, 4, shuffle=False, obs_columns=cols, cache_dir=str(tmp_path / "c")))
    kinds = [{c: (type(b["obs"][c]).__name__, getattr(b["obs"][c], "dtype", None)) for c in cols} for b in batches]
    assert kinds[0] == kinds[1] and kinds[0]["n"] == ("Tensor", torch.float64), kinds


def test_obs_values_of_no_usable_kind_are_refused_naming_the_column(tmp_path):
    schema = ObsSchema.infer([pd.DataFrame({"n": [1, 2], "name": ["a", "b"]})])
    with DatasetWriter(str(tmp_path / "d"), n_genes=2, tile_size=2, obs_schema=schema) as w:
        x = make_counts(2, 2, seed=1)
        # Strings in a numeric column (pandas 3's default string dtype), bytes as h5py reads strings.
        with pytest.raises(ValueError, match="obs column 'n' has dtype .*numeric column cannot take"):
            w.add_tile(x, obs=pd.DataFrame({"n": pd.Series(["1", "x"], dtype="string"), "name": ["a", "b"]}))
        with pytest.raises(ValueError, match=r"obs column 'name' holds bytes \(b'AAAC-1'\): decode them"):
            w.add_tile(x, obs=pd.DataFrame({"n": [1, 2], "name": np.array([b"AAAC-1", b"AAAG-1"], dtype=object)}))
        w.add_tile(x, obs=pd.DataFrame({"n": [1, 2], "name": ["a", "b"]}))
    with pytest.raises(ValueError, match="obs column 's' has dtype Sparse.*to_dense"):
        ObsSchema.infer([pd.DataFrame({"s": pd.arrays.SparseArray([0, 1, 0, 2])})])
    with pytest.raises(ValueError, match="obs column 'c' holds bytes"):
        ObsSchema.infer([pd.DataFrame({"c": pd.Categorical([b"x", b"y"])})])


def test_the_gene_table_written_and_read_by_path_and_backend(tmp_path):
    from deltacells.obs import read_var_table, write_var_table

    root = str(tmp_path / "d")
    genes = [f"g{i}" for i in range(6)]
    with DatasetWriter(root, n_genes=6, tile_size=10, level=3, var_names=genes) as w:
        w.add_tile(make_counts(10, 6, seed=3))
    var = pd.DataFrame({"gene_id": [f"ENS{i}" for i in range(6)], "length": np.arange(6, dtype=np.int64) * 100},
                       index=pd.Index(genes, name="symbol"))
    assert read_var_table(root) is None
    with pytest.raises(ValueError, match="6 genes"):
        write_var_table(root, var.iloc[:4])
    write_var_table(root, var)
    for where in (root, LocalBackend(root)):
        got = read_var_table(where)
        pd.testing.assert_frame_equal(got, var, check_index_type=False)
    ds = open_dataset(root)
    assert ds.manifest.has_var_table and ds.var_names == genes
    assert deltacells.cli.main(["verify", root]) == 0, "the dataset stays valid"
    # Written again over a table the manifest records: its new digest is recorded, and it reads.
    write_var_table(root, var.assign(length=var["length"] + 1))
    assert set(open_dataset(root).manifest.side_file_sha256) == {"var.parquet", "var_names.txt"}
    assert (read_var_table(root)["length"] == var["length"] + 1).all()
    assert deltacells.cli.main(["verify", root]) == 0
    # Not in another gene order (a sorted copy would put counts under other genes' names), nor on a store URL.
    with pytest.raises(ValueError, match="another order than its gene names"):
        write_var_table(root, var.sort_index(ascending=False))
    with pytest.raises(ValueError, match="local file system"):
        write_var_table("s3://bucket/" + root, var)
    assert (read_var_table(root)["length"] == var["length"] + 1).all(), "left as it was"
    # Not while an append is under way (or stopped before its manifest), whose manifest would drop the new digest.
    journal = os.path.join(root, deltacells._core.APPEND_JOURNAL_NAME)
    open(journal, "w").close()
    with pytest.raises(ValueError, match="append .* under way"):
        write_var_table(root, var)
    os.remove(journal)
    # Replaced by other means (pandas writing the file), the table is refused as changed, naming it.
    var.to_parquet(os.path.join(root, "var.parquet"))
    with pytest.raises(deltacells.FormatError, match=r"var\.parquet.*SHA-256.*write_var_table"):
        read_var_table(root)


def test_the_cache_s_place_and_the_compatibility_calls(built, tmp_path):
    """``cache_root`` is the directory rule's answer, ``cache_dir`` the dataset's place under it (by obs
    fingerprint), shared by copies of the dataset; ``localize(threads=...)`` and ``warmup()`` are accepted."""
    root, *_ = built
    cache = tmp_path / "cache"
    store = open_dataset(root, cache_dir=str(cache)).obs
    assert store.cache_root == resolve_cache_dir(str(cache)) == cache
    assert store.cache_dir.parent.parent == cache and store.cache_dir.name == "obs"
    assert store.localize(["age"], threads=3) == ["age"]
    assert store.localize(["age"], threads=1) == [], "already local"
    store.warmup()
    assert store.localized_columns() == ["age"]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    again = open_dataset(str(copy), cache_dir=str(cache)).obs
    assert again.cache_dir == store.cache_dir and again.localized_columns() == ["age"], "copies share the cache"


def test_ordered_obs_categories_stay_ordered_through_every_way_of_writing(tmp_path):
    """An obs categorical with ``ordered=True`` reads back ordered (and its categories in their order) from the
    converter, the Python writer, an append and a corpus, against the source read with anndata; a column stays
    ordered only while every input agrees on its order, and a version 1 dataset stores no order (the original
    package's schema)."""
    import anndata as ad
    from deltacells import convert
    from deltacells.corpus import open_corpus

    stages = ["low", "mid", "high"]
    rng = np.random.default_rng(31)

    def source(name, n, categories=stages, ordered=True):
        obs = pd.DataFrame(
            {
                "stage": pd.Categorical(rng.choice(categories, n), categories=categories, ordered=ordered),
                "kind": pd.Categorical(rng.choice(["b", "a"], n), categories=["b", "a"]),
            },
            index=[f"{name}{i}" for i in range(n)],
        )
        path = tmp_path / f"{name}.h5ad"
        ad.AnnData(X=make_counts(n, 8, seed=n), obs=obs).write_h5ad(path)
        return str(path)

    def obs_of(root):
        return open_dataset(root, cache_dir=str(tmp_path / "cache")).obs.to_pandas()

    first = source("a", 40)
    want = ad.read_h5ad(first).obs
    convert.convert_h5ad(first, str(tmp_path / "v2"), tile_size=16, level=3, log=None)
    got = obs_of(str(tmp_path / "v2"))
    assert got["stage"].dtype == want["stage"].dtype == pd.CategoricalDtype(stages, ordered=True)
    assert got["stage"].tolist() == want["stage"].tolist()
    assert got["stage"].max() == want["stage"].max()  # comparisons work as on the source
    assert got["kind"].dtype == want["kind"].dtype  # unordered stays unordered

    convert.convert_h5ad(first, str(tmp_path / "v1"), tile_size=16, level=3, log=None, format_version=1)
    assert "ordered" not in (tmp_path / "v1" / "obs" / "schema.json").read_text()
    assert not obs_of(str(tmp_path / "v1"))["stage"].cat.ordered

    # The Python writer, with a schema inferred from the frame.
    schema = ObsSchema.infer([want])
    assert schema["stage"].ordered and not schema["kind"].ordered
    assert ObsSchema.from_json(schema.to_json()) == schema
    names = [str(j) for j in range(8)]  # anndata's default gene names, as the h5ad members have
    with DatasetWriter(str(tmp_path / "w"), n_genes=8, tile_size=40, level=3, obs_schema=schema, var_names=names) as w:
        w.add_tile(make_counts(40, 8, seed=40), obs=want)
    assert obs_of(str(tmp_path / "w"))["stage"].dtype == want["stage"].dtype
    # Frames that disagree on the order (or on ordering at all) make no order.
    unordered = want.assign(stage=want["stage"].cat.as_unordered())
    assert not ObsSchema.infer([want, unordered])["stage"].ordered
    assert not ObsSchema.infer([want, want.assign(stage=want["stage"].cat.reorder_categories(stages[::-1]))])[
        "stage"
    ].ordered

    # Appending the same order keeps it; a new category has no place in it.
    convert.append(str(tmp_path / "v2"), source("b", 20))
    assert obs_of(str(tmp_path / "v2"))["stage"].cat.ordered
    convert.append(str(tmp_path / "v2"), source("c", 20, categories=[*stages, "top"]))
    grown = obs_of(str(tmp_path / "v2"))["stage"]
    assert not grown.cat.ordered and list(grown.cat.categories) == [*stages, "top"]

    # A corpus: ordered when every member is.
    convert.convert_h5ad(source("d", 30), str(tmp_path / "d"), tile_size=16, level=3, log=None)
    convert.convert_h5ad(source("e", 30, ordered=False), str(tmp_path / "e"), tile_size=16, level=3, log=None)
    both = open_corpus([str(tmp_path / "w"), str(tmp_path / "d")], cache_dir=str(tmp_path / "cache"))
    assert both.obs.ordered("stage")
    assert both.obs.take_pandas(np.arange(both.n_cells), "stage", warn=False)["stage"].cat.ordered
    mixed = open_corpus([str(tmp_path / "w"), str(tmp_path / "e")], cache_dir=str(tmp_path / "cache"))
    assert not mixed.obs.ordered("stage")


def test_float16_obs_columns_of_an_h5ad_convert_as_float32(tmp_path):
    """pandas keeps float16 obs columns (anndata writes them as 2-byte HDF5 floats): the converter reads them as the
    Python writer does, float32 holding every value exactly, missing values missing (against anndata)."""
    import anndata as ad
    from deltacells.convert import convert_h5ad

    values = np.array([0.5, 1.5, np.nan, 2.0, -3.25, 65504.0], dtype=np.float16)
    obs = pd.DataFrame({"h": values}, index=[f"c{i}" for i in range(6)])
    src = tmp_path / "f16.h5ad"
    ad.AnnData(X=make_counts(6, 4, seed=16), obs=obs).write_h5ad(src)
    convert_h5ad(str(src), str(tmp_path / "ds"), tile_size=4, level=3, log=None)
    want = ad.read_h5ad(src).obs["h"]
    assert want.dtype == np.float16
    ds = open_dataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"))
    assert ds.obs.schema["h"].arrow_type == "float"
    got = ds.obs.to_pandas()["h"]  # with a missing value, as float64 with NaN (as every number column)
    np.testing.assert_array_equal(got.to_numpy(np.float64), want.to_numpy().astype(np.float64))
