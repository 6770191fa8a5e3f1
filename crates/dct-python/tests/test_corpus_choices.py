"""Choosing a corpus's cells and reading its obs when members disagree, against pandas: splits by group in
proportions as close as the groups allow, a column whose kind differs between members, conditions given as numpy
and pandas values; and the call forms the API documents."""

import contextlib
import io
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import make_counts, require, same

pd = require("pandas")

import deltacells  # noqa: E402
from deltacells import DatasetWriter, open_corpus, open_dataset  # noqa: E402
from deltacells.obs import ObsSchema  # noqa: E402

GENES = [f"g{j}" for j in range(12)]


def write_member(root, obs, seed):
    """A member of ``len(obs)`` cells over GENES with ``obs``; returns its counts."""
    n = len(obs)
    x = make_counts(n, len(GENES), density=0.3, seed=seed)
    with DatasetWriter(root, n_genes=len(GENES), tile_size=16, level=3, var_names=GENES,
                       obs_schema=ObsSchema.infer([obs])) as w:
        for lo in range(0, n, 16):
            w.add_tile(x[lo : lo + 16], obs.iloc[lo : lo + 16].reset_index(drop=True))
    return x


@pytest.fixture(scope="module")
def donors(tmp_path_factory):
    """Five donors of uneven sizes in three members (40 + 25, 30 + 15, 20 cells): few groups, which a split by a
    hash of each donor alone often leaves a part without. Obs: ``donor`` (category), ``flag`` (bool), ``score``
    (float). Returns the corpus (its obs cached under the temporary directory), the obs as one DataFrame and the
    members' roots."""
    d = tmp_path_factory.mktemp("donors")
    rng = np.random.default_rng(5)
    roots, frames = [], []
    for i, sizes in enumerate([{"d1": 40, "d2": 25}, {"d3": 30, "d4": 15}, {"d5": 20}]):
        names = rng.permutation([name for name, k in sizes.items() for _ in range(k)])
        n = len(names)
        obs = pd.DataFrame({"donor": pd.Categorical(names), "flag": rng.random(n) < 0.4,
                            "score": rng.random(n).round(3)})
        root = str(d / f"m{i}")
        write_member(root, obs, seed=20 + i)
        roots.append(root)
        frames.append(obs.astype({"donor": str}))
    return open_corpus(roots, cache_dir=str(d / "cache")), pd.concat(frames, ignore_index=True), roots


def test_split_by_donor_gives_each_part_its_share_as_the_groups_allow(donors):
    corpus, truth, _ = donors
    sizes = truth["donor"].value_counts()
    fractions = {"train": 0.6, "val": 0.2, "test": 0.2}
    orders = set()
    for seed in range(30):
        parts = corpus.split(fractions, by="donor", seed=seed)
        owner = {}
        for name, part in parts.items():
            got = part.obs.take_pandas(range(part.n_cells), ["donor", "score"])
            for d in set(got["donor"]):
                assert owner.setdefault(d, name) == name, f"seed {seed}: donor {d} in two parts"
            # The part holds its donors whole: as many cells as pandas counts for them, with their scores.
            assert part.n_cells == sum(sizes[d] for d in set(got["donor"]))
            assert sorted(got["score"]) == sorted(truth.loc[truth["donor"].isin(set(got["donor"])), "score"])
            # Dealt to the part furthest below its fraction: no part gets more than its share and one donor.
            assert 0 < part.n_cells <= fractions[name] * corpus.n_cells + sizes.max(), (seed, name, part.n_cells)
        assert sum(p.n_cells for p in parts.values()) == corpus.n_cells
        orders.add(tuple(sorted(owner.items())))
    assert len(orders) > 1, "the seed changes the parts"


def test_a_split_takes_a_mapping_and_warns_of_a_part_left_empty(tmp_path):
    roots = [str(tmp_path / "one"), str(tmp_path / "other")]
    write_member(roots[0], pd.DataFrame({"donor": pd.Categorical(["x"] * 10)}), seed=1)
    write_member(roots[1], pd.DataFrame({"score": np.arange(6, dtype=np.float64)}), seed=2)
    corpus = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(TypeError, match="mapping of part names"):
        corpus.split([0.8, 0.2], by="donor")  # type: ignore[arg-type]
    # Two groups (donor x; the second member, without the column, one of its own) for three parts of some cells.
    with pytest.warns(UserWarning, match=r"got no cells: the groups of obs column 'donor' are too few"):
        parts = corpus.split({"train": 0.6, "val": 0.2, "test": 0.2}, by="donor")
    assert sorted(p.n_cells for p in parts.values()) == [0, 6, 10]
    # A part of fraction 0 is empty as asked: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert corpus.split({"all": 1.0, "none": 0.0}, by="donor")["none"].n_cells == 0


def test_a_column_of_labels_in_one_member_and_strings_in_another_reads_as_strings(tmp_path):
    """An h5ad categorical beside a plain string column of the same name: one string column, not a conflict."""
    rng = np.random.default_rng(4)
    a = pd.DataFrame({"batch": pd.Categorical(rng.choice(["x", "y"], 20))})
    b = pd.DataFrame({"batch": np.array(rng.choice(["y", "z"], 12), dtype=object)})
    assert str(ObsSchema.infer([b])) == "ObsSchema(batch: string)"
    roots = [str(tmp_path / "a"), str(tmp_path / "b")]
    write_member(roots[0], a, seed=1)
    write_member(roots[1], b, seed=2)
    for order in (roots, roots[::-1]):
        corpus = open_corpus(order, cache_dir=str(tmp_path / "cache"))
        want = [v for r in order for v in (a if r == roots[0] else b)["batch"]]
        obs = corpus.obs
        assert obs.conflicts == {} and obs.kind("batch") == "string"
        assert list(obs.take_pandas(range(32), "batch")["batch"]) == want
        assert corpus.where(batch=["y"]).n_cells == want.count("y")
        parts = corpus.split({"p": 0.5, "q": 0.5}, by="batch")
        owner = {}
        for name, part in parts.items():
            for v in set(part.obs.take_pandas(range(part.n_cells), "batch")["batch"]):
                assert owner.setdefault(v, name) == name, f"batch {v} in two parts"
        require("torch")
        from deltacells.torch import DeltaCellsIterableDataset

        loader = DeltaCellsIterableDataset(corpus, 8, shuffle=False, obs_columns=["batch"])
        assert [v for batch in loader for v in batch["obs"]["batch"]] == want


def test_a_column_of_two_kinds_is_refused_naming_both_members_and_the_others_stay_usable(tmp_path):
    rng = np.random.default_rng(3)
    a = pd.DataFrame({"batch": pd.Categorical(rng.choice(["x", "y"], 20)), "cell_type": pd.Categorical(
        rng.choice(["T", "B"], 20))})
    b = pd.DataFrame({"batch": rng.integers(0, 3, 12).astype(np.int64), "cell_type": pd.Categorical(
        rng.choice(["B", "NK"], 12))})
    roots = [str(tmp_path / "a"), str(tmp_path / "b")]
    write_member(roots[0], a, seed=1)
    write_member(roots[1], b, seed=2)
    corpus = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    obs = corpus.obs
    assert obs.columns == ["cell_type", "batch"], "the union, the conflicting column last"
    assert list(obs.conflicts) == ["batch"]
    reason = obs.conflicts["batch"]
    assert roots[0] in reason and roots[1] in reason and "category" in reason and "numeric" in reason
    for use in (lambda: obs.kind("batch"), lambda: obs.take([0, 25], ["batch"]), lambda: corpus.where(batch=["x"]),
                lambda: corpus.split({"a": 0.5, "b": 0.5}, by="batch")):
        with pytest.raises(ValueError, match="batch") as e:
            use()
        assert roots[0] in str(e.value) and roots[1] in str(e.value)
    torch = require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    for options in ({"obs_columns": ["batch"]}, {"stratify_by": "batch"}):
        with pytest.raises(ValueError, match="batch"):
            DeltaCellsIterableDataset(corpus, 8, **options)
    # The other column reads as in any corpus, also through the loader.
    want = list(a["cell_type"]) + list(b["cell_type"])
    assert list(obs.take_pandas(range(32), "cell_type")["cell_type"]) == want
    assert corpus.where(cell_type=["B"]).n_cells == want.count("B")
    loader = DeltaCellsIterableDataset(corpus, 8, shuffle=False, obs_columns=["cell_type"])
    codes = torch.cat([batch["obs"]["cell_type"] for batch in loader]).tolist()
    assert [obs.categories("cell_type")[c] for c in codes] == want
    # `corpus info` lists the columns and the conflict, and succeeds.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = deltacells.cli.main(["corpus", "info", *roots, "--json"])
    assert status == 0
    report = json.loads(out.getvalue())
    assert [c["column"] for c in report["obs_columns"]] == ["cell_type"]
    assert report["obs_conflicts"] == [reason]


def test_conditions_take_numpy_and_pandas_values(donors):
    corpus, truth, _ = donors

    def cells(chosen):
        return sorted(chosen.obs.take_pandas(range(chosen.n_cells), "score")["score"])

    def want(mask):
        return sorted(truth.loc[mask, "score"])

    for flag in (True, np.bool_(True), np.array([True]), [np.True_]):
        assert cells(corpus.where(flag=flag)) == want(truth["flag"]), repr(flag)
    assert cells(corpus.where(flag=[False])) == want(~truth["flag"])
    picked = ["d1", "d4"]
    for donor in (picked, np.array(picked), pd.Index(picked), pd.Series(picked), pd.Categorical(picked)):
        assert cells(corpus.where(donor=donor)) == want(truth["donor"].isin(picked)), repr(donor)
    low = np.float64(truth["score"].median())
    assert cells(corpus.where(score=(low, None))) == want(truth["score"] >= low)
    assert cells(corpus.where(score=(None, np.float32(0.5)))) == want(truth["score"] <= np.float32(0.5))
    exact = truth["score"].iloc[[3, 50]].to_numpy()
    assert cells(corpus.where(score=exact)) == want(truth["score"].isin(exact))
    # Conditions that do not fit: a ValueError naming the column, whatever was given.
    for column, bad, message in (("donor", ("d1", "d3"), "a range .* takes numbers or None, not 'd1'"),
                                 ("score", (0.1, "0.5"), "a range .* takes numbers or None, not '0.5'"),
                                 ("score", (True, None), "a range .* takes numbers or None, not True"),
                                 ("score", (1, 2, 3), "a range is a pair"),
                                 ("donor", [None], "None is not a string, number or boolean"),
                                 ("score", [np.nan], "nan is not a string, number or boolean .missing values"),
                                 ("donor", object(), "a condition is a list of values or a")):
        with pytest.raises(ValueError, match=f'condition on obs column "{column}": {message}'):
            corpus.where(**{column: bad})


def test_the_call_forms_the_api_documents(donors, tmp_path):
    corpus, _, roots = donors
    # A vocabulary is the column order: a set (whose order changes from process to process) is refused.
    with pytest.raises(TypeError, match="ordered sequence"):
        open_corpus(roots, genes=set(GENES[:3]))
    assert open_corpus(roots, genes=np.array(GENES[:3])).genes == GENES[:3]
    # get_batch(cells, values_dtype) with the dtype given by position, as the spec writes it.
    a, b = corpus.get_batch([5, 0, 99], np.int32), corpus.get_batch([5, 0, 99], values_dtype=np.float32)
    assert a.values.dtype == np.int32 and same(a.to_scipy(), b.to_scipy())
    # Tile.to_scipy(values, threads) by position too.
    tile = open_dataset(roots[0]).get_tile(0)
    got = tile.to_scipy(np.int32, 2)
    assert got.dtype == np.int32 and same(got, tile.to_scipy())
    # A single obs column by name is that column.
    ds = open_dataset(roots[0], cache_dir=str(tmp_path / "c"), obs_columns="donor")
    assert ds.obs.localized_columns() == ["donor"]
    # deltacells.obs is there after `import deltacells`, as deltacells.convert is.
    code = "import deltacells; print(deltacells.obs.ObsSchema.__name__, deltacells.convert.convert_h5ad.__name__)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["ObsSchema", "convert_h5ad"]


def test_one_uri_for_the_members_and_a_non_positive_epoch_size_are_refused_with_what_to_do(donors):
    from pathlib import Path

    from deltacells import open_corpus

    corpus, _, roots = donors
    for one in (roots[0], Path(roots[0])):
        with pytest.raises(TypeError, match="a sequence of dataset URIs"):
            open_corpus(one)
    assert open_corpus([roots[0]]).n_cells == open_dataset(roots[0]).n_cells
    torch = require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    for bad in (-5, 0, True):
        with pytest.raises(ValueError, match="epoch_cells must be a positive number"):
            DeltaCellsIterableDataset(corpus, 8, weights=[1] * len(corpus.members), epoch_cells=bad)
    # An epoch drawing the cells millions of times over would be planned in memory in proportion: refused, not
    # left to exhaust the machine.
    huge = {"epoch_cells": 10**12}
    for drawing in ({"weights": [1] * len(corpus.members)}, {"stratify_by": "donor"}):
        with pytest.raises(ValueError, match="ask for fewer cells an epoch"):
            DeltaCellsIterableDataset(corpus, 8, **drawing, **huge)
    assert torch is not None


def test_weighted_and_stratified_epochs_keep_the_loader_s_guarantees(donors):
    torch = require("torch")
    from deltacells import CountingBackend, LocalBackend
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    corpus, _, roots = donors
    names = corpus.members

    def epoch(source):
        return [b["index"].tolist() for b in source]

    # Weights as a sequence in member order are the mapping's; an epoch draws the corpus's cells by default.
    by_name = epoch(DeltaCellsIterableDataset(corpus, 8, seed=4, weights={names[0]: 1, names[1]: 2, names[2]: 0}))
    assert epoch(DeltaCellsIterableDataset(corpus, 8, seed=4, weights=[1, 2, 0])) == by_name
    assert sum(len(b) for b in by_name) == corpus.n_cells
    # A member of weight 0 is never drawn, and none of its tiles is read.
    counted = CountingBackend(LocalBackend(roots[2]))
    weighed = open_corpus([roots[0], roots[1], counted])
    counted.reset()
    drawn = torch.cat([b["dataset"] for b in DeltaCellsIterableDataset(weighed, 8, seed=4, weights=[1, 2, 0])])
    assert set(drawn.tolist()) == {0, 1}
    assert not [name for name, _, _ in counted.log if name.startswith("tiles/")], "no tile of the unweighted member"
    # Every rank the same number of batches, as len() says, weighted or stratified.
    for options in ({"weights": [1, 2, 1]}, {"stratify_by": "donor"}):
        ranks = [DeltaCellsIterableDataset(corpus, 8, seed=1, rank=r, world_size=3, **options) for r in range(3)]
        counts = [len(epoch(r)) for r in ranks]
        assert len(set(counts)) == 1 and counts[0] == len(ranks[0]), (options, counts)
    # Resumed from the loader's state (the loader counts the batches its workers send), with and without workers:
    # the interrupted epoch and its rest are the uninterrupted epoch.
    for options in ({"weights": [1, 2, 1], "epoch_cells": 200}, {"stratify_by": "donor"}):
        for workers in (0, 2):
            whole = epoch(make_loader(corpus, 8, seed=6, num_workers=workers, **options))
            first = make_loader(corpus, 8, seed=6, num_workers=workers, **options)
            taken = []
            for b in first:
                taken.append(b["index"].tolist())
                if len(taken) == 3:
                    break
            again = make_loader(corpus, 8, seed=6, num_workers=workers, **options)
            again.load_state_dict(first.state_dict())
            assert taken + epoch(again) == whole, (options, workers)
            del first, again


def test_a_split_by_cell_holds_its_fraction_of_every_member(donors):
    """Each part of a split without ``by`` holds its fraction of each member's cells to within one cell, counted
    from the obs each cell carries (the cells themselves, not the part's own count)."""
    corpus, truth, _ = donors
    member_of = corpus.member_of(np.arange(corpus.n_cells))
    per_member = np.bincount(member_of)
    for fractions in ({"train": 0.8, "val": 0.1, "test": 0.1}, {"a": 0.5, "b": 0.5}, {"x": 0.7, "y": 0.3}):
        for seed in range(5):
            parts = corpus.split(fractions, seed=seed)
            scores = []
            for name, part in parts.items():
                got = part.member_cells
                want = np.array([fractions[name] * n for n in per_member])
                assert np.all(np.abs(np.array(got) - want) <= 1), (fractions, seed, name, got)
                scores.extend(part.obs.take(np.arange(part.n_cells), ["score"])["score"].tolist())
            assert sorted(scores) == sorted(truth["score"]), "disjoint and covering"
    # Over a selection: the fractions are of each member's selected cells.
    flagged = corpus.where(flag=[True])
    per_member = np.bincount(flagged.member_of(np.arange(flagged.n_cells)), minlength=len(corpus.members))
    assert sum(per_member) == int(truth["flag"].sum())
    for seed in range(5):
        parts = flagged.split({"a": 0.7, "b": 0.3}, seed=seed)
        for name, f in (("a", 0.7), ("b", 0.3)):
            assert np.all(np.abs(np.array(parts[name].member_cells) - f * per_member) <= 1), (seed, name)
            assert parts[name].obs.take(np.arange(parts[name].n_cells), ["flag"])["flag"].all()


def test_a_split_by_cell_is_the_same_however_the_members_locations_are_spelled(donors, monkeypatch):
    """A preprocessing job and a training job may name the same datasets differently (absolute or relative paths,
    ``file://`` URLs, names of their own): the parts must be the same cells."""
    import os

    _, _, roots = donors
    monkeypatch.chdir(os.path.dirname(roots[0]))
    spellings = {
        "absolute": roots,
        "relative": [os.path.basename(r) for r in roots],
        "file URL": ["file://" + os.path.abspath(r) for r in roots],
        "named": {f"member {i}": r for i, r in enumerate(roots)},
    }
    split = {how: open_corpus(members).split({"a": 0.6, "b": 0.4}, seed=3) for how, members in spellings.items()}
    for how, parts in split.items():
        for name, part in parts.items():
            ref = split["absolute"][name]
            assert part.member_cells == ref.member_cells, (how, name)
            got, want = part.get_batch(range(part.n_cells)), ref.get_batch(range(ref.n_cells))
            assert same(got.to_scipy(), want.to_scipy()), (how, name)


def test_where_takes_numbers_for_categories_of_numbers(tmp_path):
    """A category column of numbers (pandas' ``Categorical([1, 2, 3])``) takes ``where(batch=[1])`` as pandas'
    ``isin([1])`` does, and its labels' text too."""
    obs = pd.DataFrame({"batch": pd.Categorical([1, 2, 3, 1] * 4)})
    root = str(tmp_path / "m")
    write_member(root, obs, seed=3)
    corpus = open_corpus([root], cache_dir=str(tmp_path / "cache"))
    want = np.flatnonzero(obs["batch"].isin([1]))
    for value in ([1], [1.0], ["1"]):
        chosen = corpus.where(batch=value)
        assert chosen.n_cells == len(want), value
        assert same(chosen.get_batch(range(chosen.n_cells)).to_scipy(), corpus.get_batch(want).to_scipy()), value
    assert corpus.where(batch=[1, 3]).n_cells == int(obs["batch"].isin([1, 3]).sum())


def test_seeds_are_taken_as_torch_takes_them_and_refused_when_made(donors):
    """A negative seed is the same seed modulo 2**64 (as ``torch.Generator.manual_seed`` takes it), for a split
    and for the loader's epochs; a seed that is not an integer or out of range is refused when the split is asked
    or the dataset made, not in a worker."""
    torch = require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    corpus, _, roots = donors
    wrapped = corpus.split({"a": 0.5, "b": 0.5}, seed=(1 << 64) - 1)
    negative = corpus.split({"a": 0.5, "b": 0.5}, seed=-1)
    for k in "ab":
        cells = np.arange(wrapped[k].n_cells)
        assert wrapped[k].n_cells == negative[k].n_cells
        scores = [part[k].obs.take(cells, ["score"])["score"] for part in (wrapped, negative)]
        assert np.array_equal(*scores)
    assert [b["index"].tolist() for b in DeltaCellsIterableDataset(corpus, 8, seed=-7)] == [
        b["index"].tolist() for b in DeltaCellsIterableDataset(corpus, 8, seed=(1 << 64) - 7)
    ]
    assert DeltaCellsIterableDataset(corpus, 8, seed=np.int64(-7)).seed == (1 << 64) - 7
    # One dataset, and through make_loader, alike.
    from deltacells.torch import make_loader

    one = roots[0]
    want = [b["index"].tolist() for b in DeltaCellsIterableDataset(one, 8, seed=(1 << 64) - 3)]
    assert [b["index"].tolist() for b in DeltaCellsIterableDataset(one, 8, seed=-3)] == want
    assert [b["index"].tolist() for b in make_loader(one, 8, seed=-3)] == want
    for bad, error in ((1 << 64, ValueError), (-(1 << 63) - 1, ValueError), (1.5, TypeError), ("3", TypeError),
                       (True, TypeError)):
        with pytest.raises(error, match="seed"):
            corpus.split({"a": 1.0}, seed=bad)
        with pytest.raises(error, match="seed"):
            DeltaCellsIterableDataset(corpus, 8, seed=bad)
    assert torch.Generator().manual_seed(-1).initial_seed() == (1 << 64) - 1  # the rule followed


def test_corpus_obs_takes_the_dataset_s_call_form_and_warns_only_for_a_fetch(tmp_path):
    """``corpus.obs.take(cells, columns, warn=False)``, as code written for a dataset's obs calls it; a column some
    member must fetch warns once (unless ``warn=False``), one found in the node's cache does not."""
    rng = np.random.default_rng(8)
    roots = []
    for i in range(2):
        obs = pd.DataFrame({"donor": pd.Categorical(rng.choice(["p", "q"], 20)), "score": rng.random(20)})
        roots.append(str(tmp_path / f"m{i}"))
        write_member(roots[-1], obs, seed=30 + i)
    cache = str(tmp_path / "cache")
    with pytest.warns(UserWarning, match="donor"):
        open_corpus(roots, cache_dir=cache).obs.take([0, 39], ["donor"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_corpus(roots, cache_dir=cache).obs.take([0, 39], ["donor"])["donor"].shape == (2,)  # cached
        fresh = open_corpus(roots, cache_dir=str(tmp_path / "other"))
        assert len(fresh.obs.take_pandas([1, 2], ["score"], warn=False)) == 2
        assert fresh.obs.localize(["donor"]) == ["donor"] and fresh.obs.localize(["donor"]) == []
