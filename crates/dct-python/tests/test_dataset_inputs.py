"""What the reader and writer take from users: indices as numpy means them, a StoreBackend's own options, and a
writer's gene order fixed by its first tile."""

import os

import numpy as np
import pytest
from conftest import make_counts, require, s3_or_skip, same
from deltacells import DatasetWriter, StoreBackend, open_dataset

N, G, TILE = 120, 30, 50


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("inputs") / "ds")
    full = make_counts(N, G, density=0.2, seed=71)
    import pandas as pd
    from deltacells.obs import ObsSchema

    obs = pd.DataFrame({"depth": np.arange(N, dtype=np.float64)})
    with DatasetWriter(root, n_genes=G, tile_size=TILE, level=3, obs_schema=ObsSchema.infer([obs])) as w:
        for lo in range(0, N, TILE):
            w.add_tile(full[lo : lo + TILE], obs=obs.iloc[lo : lo + TILE])
    return root, full


def test_a_boolean_mask_selects_cells(built, tmp_path):
    root, full = built
    ds = open_dataset(root, cache_dir=str(tmp_path / "c"))
    mask = np.zeros(N, bool)
    mask[[3, 60, 119]] = True
    want = full[np.flatnonzero(mask)].toarray()
    assert np.array_equal(ds.get_batch(mask).to_scipy().toarray(), want)
    assert np.array_equal(ds[mask].to_scipy().toarray(), want)
    assert np.array_equal(ds.get_batch(list(mask)).to_scipy().toarray(), want), "a list of booleans too"
    assert ds.batch_nnz(mask) == full[np.flatnonzero(mask)].nnz
    assert ds.obs.take(mask, ["depth"], warn=False)["depth"].tolist() == [3.0, 60.0, 119.0]
    assert ds.get_batch(np.zeros(N, bool)).n_rows == 0
    for wrong in (np.ones(N - 1, bool), np.ones(N + 1, bool), [True, False]):
        with pytest.raises(IndexError, match="boolean mask"):
            ds.get_batch(wrong)
        with pytest.raises(IndexError, match="boolean mask"):
            ds.obs.take(wrong, ["depth"], warn=False)


def test_float_indices_are_a_type_error_not_truncated(built, tmp_path):
    root, full = built
    ds = open_dataset(root, cache_dir=str(tmp_path / "c"))
    for bad in ([1.5, 2.0], np.array([0.0, 1.0]), [1, 2.7]):
        with pytest.raises(TypeError, match="integers"):
            ds.get_batch(bad)
        with pytest.raises(TypeError, match="integers"):
            ds[bad]
        with pytest.raises(TypeError, match="integers"):
            ds.obs.take(bad, ["depth"], warn=False)
    # Every integer dtype, and an iterator, still work.
    for dtype in (np.int8, np.uint16, np.int32, np.uint64):
        assert np.array_equal(ds.get_batch(np.array([5, 2], dtype)).to_scipy().toarray(), full[[5, 2]].toarray())
    assert ds.get_batch(iter([7, 1])).n_rows == 2
    with pytest.raises(IndexError):
        ds.get_batch(np.array([2**63 + 5], np.uint64))


def test_keys_numpy_would_read_otherwise_are_refused_not_reinterpreted(built, tmp_path):
    """A boolean scalar (a new axis to numpy, not cell 0 or 1), a tuple (several axes), indices of two dimensions
    (flattened, they would be another batch's shape) and an empty float array (numpy refuses its type): errors."""
    root, full = built
    ds = open_dataset(root, cache_dir=str(tmp_path / "c"))
    torch = require("torch")
    for key in (True, np.bool_(False), np.array(True), torch.tensor(True)):
        with pytest.raises(IndexError, match="not a cell index"):
            ds[key]
    with pytest.raises(IndexError, match="too many indices"):
        ds[(1, 2)]
    for where in (ds.get_batch, ds.__getitem__, lambda k: ds.obs.take(k, ["depth"], warn=False)):
        with pytest.raises(IndexError, match="one-dimensional, not of shape .2, 2."):
            where(np.array([[1, 2], [3, 4]]))
        with pytest.raises(TypeError, match="integers or a boolean mask, not float64"):
            where(np.array([], dtype=float))
    # What numpy takes, the dataset takes: integers of any kind, an empty list, a 0-d integer array.
    assert ds[[]].n_rows == 0 and ds.get_batch(np.array([], np.int64)).n_rows == 0
    assert np.array_equal(ds[np.array(7)].to_scipy().toarray(), full[[7]].toarray())
    assert np.array_equal(ds[-1].to_scipy().toarray(), full[[N - 1]].toarray())


def test_gene_order_cannot_change_after_the_first_tile(tmp_path):
    full = make_counts(40, 8, density=0.4, seed=9)
    order = np.random.default_rng(4).permutation(8)
    w = DatasetWriter(str(tmp_path / "g"), n_genes=8, tile_size=20, level=3, var_names=[f"g{j}" for j in range(8)])
    w.gene_order = order
    w.add_tile(full[:20])
    with pytest.raises(ValueError, match="first tile"):
        w.gene_order = order[::-1]
    with pytest.raises(ValueError, match="first tile"):
        w.gene_order = None
    w.gene_order = order.copy()  # the same order again changes nothing
    w.add_tile(full[20:])
    w.close()
    ds = open_dataset(str(tmp_path / "g"))
    assert list(ds.gene_order) == list(order)
    assert ds.var_names == [f"g{j}" for j in order], "names match the stored columns"
    assert same(ds[:].to_scipy(), full[:, order])
    late = DatasetWriter(str(tmp_path / "late"), n_genes=8, tile_size=20, level=3)
    late.add_tile(full[:20])
    with pytest.raises(ValueError, match="first tile"):
        late.gene_order = order


def test_a_store_backend_s_options_reach_the_reader(built, tmp_path):
    """The endpoint and credentials exist only in the backend's options (nothing in the environment), through the
    dataset and through the loader."""
    url, options = s3_or_skip()
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        assert k not in ("AWS_ENDPOINT", "AWS_ENDPOINT_URL"), "the test needs the endpoint only in the options"
    _, full = built
    with DatasetWriter(url, n_genes=G, tile_size=TILE, level=3, storage_options=options) as w:
        for lo in range(0, N, TILE):
            w.add_tile(full[lo : lo + TILE])
    ds = open_dataset(StoreBackend(url, options))
    assert same(ds.get_batch(np.arange(N)).to_scipy(), full)
    require("torch")
    from deltacells.torch import make_loader

    for workers in (0, 2):
        rows = {}
        for b in make_loader(StoreBackend(url, options), 32, seed=1, num_workers=workers):
            rows.update(zip(b["index"].tolist(), b["X"].to_dense().numpy()))
        assert sorted(rows) == list(range(N)) and same(np.stack([rows[i] for i in range(N)]), full.toarray())


def test_a_dataset_opened_by_a_relative_path_opens_the_same_folder_after_the_working_directory_changes(
        built, tmp_path, monkeypatch):
    """Opened by a path relative to the working directory, which then changes (as Hydra changes it): reopening
    (after ``close()``, unpickled, in a loader) reads the same folder, not one under the new directory."""
    import pickle

    torch = require("torch")
    from deltacells.torch import make_loader

    root, full = built
    monkeypatch.chdir(os.path.dirname(root))
    relative = os.path.basename(root)
    ds = open_dataset(relative)
    pickled = pickle.dumps(ds)
    loader = make_loader(relative, 7, shuffle=False)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / relative).mkdir(parents=True)  # an empty folder of the same name
    monkeypatch.chdir(elsewhere)
    ds.close()
    cells = np.arange(0, full.shape[0], 5)
    assert same(ds.get_batch(cells).to_scipy(), full[cells])
    assert same(pickle.loads(pickled).get_batch(cells).to_scipy(), full[cells])
    assert ds.uri == relative, "the path as given"
    rows = torch.cat([b["X"].to_dense() for b in loader]).numpy()
    np.testing.assert_array_equal(rows, full.toarray())
