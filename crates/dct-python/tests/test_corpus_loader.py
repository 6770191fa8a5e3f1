"""The training loader over a corpus against the source: every selected cell once with its member, ranks, resume,
weights and strata, and the corpus's obs in batches."""

import os

import numpy as np
import pytest
from conftest import require
from corpus_members import obs_truth, truth

pd = require("pandas")

from deltacells import open_corpus, open_dataset  # noqa: E402


def _epoch(loader):
    import torch

    out = []
    for b in loader:
        # The types CORPUS.md and PYTHON-API.md give: int64 cell and member indices, a CSR X with int32 offsets.
        assert b["index"].dtype == torch.int64 and b["dataset"].dtype == torch.int64
        assert b["X"].layout == torch.sparse_csr and b["X"].crow_indices().dtype == torch.int32
        out.append((b["index"].numpy().copy(), b["dataset"].numpy().copy(), b["X"].to_dense().numpy()))
    return out


def _first_indices(it, k):
    """The cell indices of the first ``k`` batches of ``it`` (a dataset or loader, its pass then left)."""
    taken = []
    for b in it:
        taken.append(b["index"].numpy().copy())
        if len(taken) == k:
            break
    return taken


def test_the_loader_serves_every_selected_cell_once_with_its_member(members):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    roots, sources = members
    corpus = open_corpus(roots, genes="intersection")
    sub = corpus.select(np.arange(corpus.n_cells) % 3 != 0)
    expected = truth(sources, corpus.genes)[np.arange(corpus.n_cells) % 3 != 0]
    for workers, context in ((0, None), (2, None), (2, "spawn")):
        extra = {} if context is None else {"multiprocessing_context": context}
        loader = make_loader(sub, 16, seed=5, shuffle_tiles=2, num_workers=workers, **extra)
        batches = _epoch(loader)
        assert len(batches) == len(loader)
        index = np.concatenate([i for i, _, _ in batches])
        assert sorted(index.tolist()) == list(range(sub.n_cells)), f"every cell once ({workers} workers, {context})"
        for i, d, x in batches:
            np.testing.assert_array_equal(x, expected[i])
            np.testing.assert_array_equal(d, sub.member_of(i))
    # Each tile holding selected cells is fetched once in the epoch, and no other tile (in order, so that nothing of
    # the next epoch is fetched ahead); the readers give back the tiles of the windows left behind.
    part = corpus.select(np.r_[0:40, 150:200])  # member 0's first two tiles, member 2's last three, none of 1
    ds = DeltaCellsIterableDataset(part, 16, shuffle=False, shuffle_tiles=2)
    assert len(_epoch(ds)) == len(ds)
    assert [n > 0 for n in part.tile_cells] == [True, True, False, False, False, True, True, True]
    assert ds.stats()["tiles_fetched"] == 5


def test_ranks_get_disjoint_equal_shares_of_a_corpus(members):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    roots, _ = members
    corpus = open_corpus(roots)
    shares = [_epoch(DeltaCellsIterableDataset(corpus, 10, seed=1, rank=r, world_size=3)) for r in range(3)]
    assert len({len(s) for s in shares}) == 1, "every rank the same number of batches"
    seen = [set(np.concatenate([i for i, _, _ in s]).tolist()) for s in shares]
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2]) and not (seen[0] & seen[2])
    assert sum(len(s) for s in seen) >= corpus.n_cells - 2, "at most world_size - 1 cells left out"


@pytest.mark.parametrize("source", ["dataset", "loader"])
def test_a_resumed_corpus_epoch_is_the_uninterrupted_one(members, source):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    roots, _ = members
    corpus = open_corpus(roots, genes="union")

    def make():
        return DeltaCellsIterableDataset(corpus, 12, seed=3) if source == "dataset" else make_loader(corpus, 12, seed=3)

    whole = _epoch(make())
    first = make()
    taken = _first_indices(first, 5)
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    rest = [i for i, _, _ in _epoch(again)]
    assert [t.tolist() for t in taken + rest] == [i.tolist() for i, _, _ in whole]
    other = open_corpus(roots, genes="intersection")
    with pytest.raises(ValueError, match="dataset"):
        DeltaCellsIterableDataset(other, 12, seed=3).load_state_dict(state)


def test_a_state_of_another_selection_is_refused_even_with_as_many_cells_in_each_tile(members):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    roots, _ = members
    corpus = open_corpus(roots, genes="union")
    even = corpus.select(np.arange(0, corpus.n_cells, 2))
    odd = corpus.select(np.arange(1, corpus.n_cells, 2))
    assert even.tile_cells == odd.tile_cells, "the layouts alone cannot tell the selections apart"
    first = DeltaCellsIterableDataset(even, 12, seed=3)
    next(iter(first))
    state = first.state_dict()
    with pytest.raises(ValueError, match="another selection of the corpus's cells"):
        DeltaCellsIterableDataset(odd, 12, seed=3).load_state_dict(state)
    DeltaCellsIterableDataset(even, 12, seed=3).load_state_dict(state)  # the same cells: accepted


def test_a_weighted_epoch_draws_each_member_s_share_and_resumes(members):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset

    roots, _ = members
    corpus = open_corpus({f"m{i}": r for i, r in enumerate(roots)})
    weights = {"m0": 1.0, "m1": 3.0, "m2": 1.0}

    def make(epoch_cells):
        return DeltaCellsIterableDataset(corpus, 1000, seed=2, weights=weights, epoch_cells=epoch_cells,
                                         shuffle_tiles=3)

    ds = make(100_000)
    drawn = np.bincount(np.concatenate([b["dataset"].numpy() for b in ds]), minlength=3)
    assert drawn.sum() == 100_000 == len(ds) * 1000
    np.testing.assert_allclose(drawn / drawn.sum(), [0.2, 0.6, 0.2], atol=0.01)
    whole = [b["index"].numpy().copy() for b in make(12_000)]
    first = make(12_000)
    taken = _first_indices(first, 5)
    again = make(12_000)
    again.load_state_dict(first.state_dict())
    rest = [b["index"].numpy().copy() for b in again]
    assert [t.tolist() for t in taken + rest] == [w.tolist() for w in whole], "the resumed epoch is the same"
    with pytest.raises(ValueError, match="weights"):
        DeltaCellsIterableDataset(corpus, 1000, seed=2, weights={"m0": 1.0}, epoch_cells=12_000,
                                  shuffle_tiles=3).load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="does not have"):
        DeltaCellsIterableDataset(corpus, 10, weights={"nope": 1.0})
    with pytest.raises(ValueError, match="one dataset"):
        DeltaCellsIterableDataset(roots[0], 10, weights=[1.0])
    with pytest.raises(ValueError, match="weights"):
        DeltaCellsIterableDataset(corpus, 10, weights=[1.0, 2.0])  # one weight too few
    with pytest.raises(ValueError, match='member "m1" has weight -1.*not negative'):
        DeltaCellsIterableDataset(corpus, 10, weights={"m0": 1.0, "m1": -1.0})
    with pytest.raises(ValueError, match="not negative"):
        DeltaCellsIterableDataset(corpus, 10, weights=[1.0, float("nan"), 1.0])
    with pytest.raises(ValueError, match="add up to 0"):
        DeltaCellsIterableDataset(corpus, 10, weights={"m0": 0.0, "m1": 0.0, "m2": 0.0})
    with pytest.raises(ValueError, match="add up to 0"):
        DeltaCellsIterableDataset(corpus, 10, weights=[0, 0, 0])
    # A member drawn beyond its size starts another pass over its cells, reshuffled: three passes over m0 serve
    # each of its cells three times, and no two passes in the same order.
    n0 = corpus.member_cells[0]
    ds = DeltaCellsIterableDataset(corpus, 16, seed=2, weights=[1.0, 0.0, 0.0], epoch_cells=3 * n0, shuffle_tiles=2)
    drawn = np.concatenate([b["index"].numpy() for b in ds])
    assert np.bincount(drawn, minlength=corpus.n_cells).tolist() == [3] * n0 + [0] * (corpus.n_cells - n0)
    # Pass k's order: the cells by their k-th appearance (a window may mix the end of one pass and the next).
    seen: dict[int, int] = {}
    passes: list[list[int]] = [[], [], []]
    for c in drawn.tolist():
        passes[seen.get(c, 0)].append(c)
        seen[c] = seen.get(c, 0) + 1
    assert passes[0] != passes[1] and passes[1] != passes[2] and passes[0] != passes[2], "each pass reshuffled"


def _tissues(batches, categories, df):
    """Each batch's tissue labels from the loader, checked against the source's (pandas) for the same cells."""
    out = []
    for b in batches:
        assert min(b["obs"]["tissue"].tolist()) >= 0, "cells without a value are not drawn"
        got = [categories[c] for c in b["obs"]["tissue"].tolist()]
        assert got == [df["tissue"][i] for i in b["index"].numpy()]
        out.extend(got)
    return out


def test_a_stratified_epoch_balances_categories_and_resumes(members, tmp_path):
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    roots, sources = members
    corpus = open_corpus({f"m{i}": r for i, r in enumerate(roots)}, cache_dir=str(tmp_path / "cache"))
    df = obs_truth(sources)
    present = df["tissue"].dropna()
    assert present.value_counts(normalize=True).min() < 0.2, "the categories are far from balanced in the source"

    # Equal shares over 100,000 draws at the default window, with and without workers (which build their own
    # strata, under fork and spawn).
    for workers, context in ((0, None), (2, "spawn")):
        extra = {} if context is None else {"multiprocessing_context": context}
        loader = make_loader(corpus, 1000, seed=2, stratify_by="tissue", epoch_cells=100_000, obs_columns=["tissue"],
                             num_workers=workers, **extra)
        labels = _tissues(loader, loader.dataset.categories("tissue"), df)
        assert len(labels) == 100_000
        shares = pd.Series(labels).value_counts(normalize=True)
        np.testing.assert_allclose(shares[["lung", "blood", "gut"]], [1 / 3] * 3, atol=0.02)
    # Class weights; the default epoch is the cells with a value.
    ds = DeltaCellsIterableDataset(corpus, 1000, seed=2, stratify_by="tissue", obs_columns=["tissue"],
                                   class_weights={"lung": 2.0, "blood": 1.0, "gut": 1.0}, epoch_cells=100_000)
    shares = pd.Series(_tissues(ds, ds.categories("tissue"), df)).value_counts(normalize=True)
    np.testing.assert_allclose(shares[["lung", "blood", "gut"]], [0.5, 0.25, 0.25], atol=0.02)
    assert len(DeltaCellsIterableDataset(corpus, 1, stratify_by="tissue")) == len(present)
    # Locality: an epoch of the cells with a value fetches each tile holding one once, and none of member 1's,
    # which has no tissue column (as tile_cells counts them: 3 + 2 + 3 tiles of 32 cells).
    fresh = open_corpus({f"m{i}": r for i, r in enumerate(roots)}, cache_dir=str(tmp_path / "cache"))
    assert len(fresh.tile_cells) == 8
    ds = DeltaCellsIterableDataset(fresh, 16, seed=3, stratify_by="tissue", shuffle_tiles=2)
    assert sum(len(b["index"]) for b in ds) == len(present)
    assert ds.stats()["tiles_fetched"] == 6

    # A resumed stratified epoch is the uninterrupted one.
    def make():
        return DeltaCellsIterableDataset(corpus, 100, seed=6, stratify_by="tissue", epoch_cells=3_000)

    whole = [b["index"].numpy().copy() for b in make()]
    first = make()
    taken = _first_indices(first, 7)
    again = make()
    again.load_state_dict(first.state_dict())
    again.set_epoch(0)  # what a training loop does at the start of each epoch
    rest = [b["index"].numpy().copy() for b in again]
    assert [t.tolist() for t in taken + rest] == [w.tolist() for w in whole]
    with pytest.raises(ValueError, match="class_weights"):
        DeltaCellsIterableDataset(corpus, 100, seed=6, stratify_by="tissue", epoch_cells=3_000,
                                  class_weights={"gut": 1.0}).load_state_dict(first.state_dict())

    # Refusals, at construction.
    with pytest.raises(ValueError, match="not a category column"):
        DeltaCellsIterableDataset(corpus, 10, stratify_by="n_genes")
    with pytest.raises(KeyError, match="tissue"):
        DeltaCellsIterableDataset(corpus, 10, stratify_by="nope")
    with pytest.raises(ValueError, match="does not have"):
        DeltaCellsIterableDataset(corpus, 10, stratify_by="tissue", class_weights={"bone": 1.0})
    with pytest.raises(ValueError, match="add up to 0"):
        DeltaCellsIterableDataset(corpus, 10, stratify_by="tissue", class_weights={"gut": 0.0})
    with pytest.raises(ValueError, match="cannot be combined"):
        DeltaCellsIterableDataset(corpus, 10, stratify_by="tissue", weights={"m0": 1.0})
    with pytest.raises(ValueError, match="give stratify_by"):
        DeltaCellsIterableDataset(corpus, 10, class_weights={"gut": 1.0})
    with pytest.raises(ValueError, match="open_corpus"):
        DeltaCellsIterableDataset(roots[0], 10, stratify_by="tissue")
    no_gut = corpus.select(np.flatnonzero(df["tissue"].to_numpy() != "gut"))
    with pytest.raises(ValueError, match="gut"):
        DeltaCellsIterableDataset(no_gut, 10, stratify_by="tissue", class_weights={"gut": 1.0, "lung": 1.0})


def test_the_loader_serves_a_corpus_s_obs(members, tmp_path):
    require("torch")
    from deltacells.torch import make_loader

    roots, sources = members
    corpus = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    df = obs_truth(sources)
    for workers in (0, 2):
        loader = make_loader(corpus, 32, seed=4, obs_columns=["donor", "tissue", "n_genes", "barcode"],
                             num_workers=workers)
        donors = loader.dataset.categories("donor")
        tissues = loader.dataset.categories("tissue")
        seen = 0
        for b in loader:
            index = b["index"].numpy()
            seen += len(index)
            assert [donors[c] for c in b["obs"]["donor"].tolist()] == [df["donor"][i] for i in index]
            got_tissue = [None if c < 0 else tissues[c] for c in b["obs"]["tissue"].tolist()]
            assert got_tissue == [df["tissue"][i] for i in index]
            np.testing.assert_array_equal(b["obs"]["n_genes"].numpy(), df["n_genes"].to_numpy(np.float64)[index])
            # Strings as lists, as over one dataset.
            assert b["obs"]["barcode"] == [df["barcode"][i] for i in index]
        assert seen == corpus.n_cells
    with pytest.raises(KeyError):
        make_loader(corpus, 32, obs_columns=["nope"])
    # None, as open_dataset and open_corpus take it, is no columns: batches without obs.
    for uri in (corpus, roots[0]):
        batch = next(iter(make_loader(uri, 32, seed=4, obs_columns=None)))
        assert "obs" not in batch or not batch["obs"]


def test_a_corpus_with_no_cells_is_refused_when_its_loader_is_made(members):
    """An empty selection would give an epoch of no batches, ending a training loop at once without a word: the
    loader refuses it where it is made (not in a worker)."""
    require("torch")
    from deltacells.torch import DeltaCellsIterableDataset, make_loader

    roots, _ = members
    corpus = open_corpus(roots)
    for empty in (corpus.select([]), corpus.select(np.zeros(corpus.n_cells, bool)),
                  corpus.where(donor=["no such donor"])):
        assert empty.n_cells == 0
        with pytest.raises(ValueError, match="no cells to train on"):
            DeltaCellsIterableDataset(empty, 8)
        with pytest.raises(ValueError, match="no cells to train on"):
            make_loader(empty, 8, num_workers=2)


def test_the_last_windows_of_a_corpus_epoch_fetch_the_next_epoch_s_first_tiles(tmp_path):
    """A corpus's loader, like one dataset's, spends the room its epoch's last windows leave on the next epoch's first
    tiles: when the next epoch starts, its first window needs no request to the store. Two members, each read through
    a backend logging its reads; the smallest budget (a window and one tile fetched ahead), so no tile of the next
    epoch's first window stays from the epoch's own reads (checked by its plan)."""
    import time

    require("torch")
    from conftest import LoggingBackend, make_counts, write_dataset
    from deltacells.torch import DeltaCellsIterableDataset

    names = [f"g{g}" for g in range(30)]
    roots = [write_dataset(tmp_path / f"m{k}", make_counts(200, 30, density=0.2, seed=80 + k), 20, var_names=names)
             for k in range(2)]
    logs = [tmp_path / f"m{k}.log" for k in range(2)]
    corpus = open_corpus({"a": LoggingBackend(roots[0], str(logs[0])), "b": LoggingBackend(roots[1], str(logs[1]))})
    per_member = [len(t) for t in (corpus.datasets[0].manifest.tile_cells, corpus.datasets[1].manifest.tile_cells)]

    def made(seed):
        return DeltaCellsIterableDataset(corpus, 20, seed=seed, shuffle_tiles=1, memory_budget=1)

    def tile_name(t):
        member = 0 if t < per_member[0] else 1
        return member, f"tiles/tile_{t - member * per_member[0]:06d}.dct"

    # A seed whose epoch 1 starts on a tile none of epoch 0's last three reads.
    for seed in range(1, 100):
        ds = made(seed)
        last, first = ds._plan(0, 1, 0, 0).tile_order()[-3:], ds._plan(0, 1, 0, 1).tile_order()[0]
        if first not in last:
            break
    else:
        raise AssertionError("no seed found")
    for _ in ds:
        time.sleep(0.005)  # a training step
    time.sleep(0.5)  # the fetch ahead lands
    seen = [len(log.read_text().split()) for log in logs]
    ds.set_epoch(1)
    batch = next(iter(ds))
    assert len(batch["index"]) == 20
    member, name = tile_name(first)
    asked = logs[member].read_text().split()[seen[member]:]
    assert name not in asked, f"epoch 1's first tile {name} of member {member} was fetched when epoch 1 began"
    assert name in logs[member].read_text().split()[: seen[member]]


def test_workers_forked_after_the_training_process_read_the_corpus_serve_the_epoch(members):
    """A corpus read in the training process (a batch looked at, a loader without workers run) before a loader
    forks its workers: the workers' reads must not wait on thread pools the fork left without threads. Run in a
    child process with a time limit, so that a hang fails the test instead of stopping the suite."""
    require("torch")
    import subprocess
    import sys
    import textwrap

    roots, _ = members
    script = textwrap.dedent(f"""
        import numpy as np
        from deltacells import open_corpus
        from deltacells.torch import make_loader
        corpus = open_corpus({roots!r}, genes="union")
        corpus.get_batch(np.arange(0, corpus.n_cells, 7))  # rows of every member, in this process
        next(iter(make_loader(corpus, 16, seed=1)))
        seen = []
        for context in ("fork", "spawn"):
            loader = make_loader(corpus, 16, seed=2, num_workers=2, multiprocessing_context=context)
            index = np.concatenate([b["index"].numpy() for b in loader])
            assert sorted(index.tolist()) == list(range(corpus.n_cells)), context
        print("served", corpus.n_cells)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "served" in done.stdout, done.stderr[-3000:]


def test_the_members_of_a_corpus_share_one_set_of_threads(tmp_path):
    """Each member opened with threads of its own made a corpus of a thousand members start thousands of threads
    (an I/O runtime and a decode pool each), in every DataLoader worker too: the members run on the first one's."""
    from conftest import make_counts, write_dataset

    def decode_pools() -> int:
        # A reader's decode pool names its threads dct-decode-N (the I/O runtime's blocking threads, which come
        # and go with local file reads, are not counted).
        tasks = os.listdir("/proc/self/task")
        return sum(open(f"/proc/self/task/{t}/comm").read().startswith("dct-decode") for t in tasks)

    roots = [write_dataset(str(tmp_path / f"m{k}"), make_counts(20, 8, seed=k), 10,
                           var_names=[f"g{(j + k) % 12}" for j in range(8)]) for k in range(24)]
    before = decode_pools()
    corpus = open_corpus(roots, genes="union")
    grown = decode_pools() - before
    assert grown <= 2, f"{grown} decode threads for 24 members"
    # A corpus pickled to a spawned DataLoader worker: its members share one set there too.
    import pickle

    clone = pickle.loads(pickle.dumps(corpus))
    assert len({id(d._threads) for d in clone._datasets}) == 1
    before = decode_pools()
    np.testing.assert_array_equal(clone.get_batch(np.arange(clone.n_cells)).to_scipy().toarray(),
                                  corpus.get_batch(np.arange(corpus.n_cells)).to_scipy().toarray())
    assert decode_pools() - before <= 2
    whole = corpus.get_batch(np.arange(corpus.n_cells)).to_scipy()
    assert whole.shape == (24 * 20, 12)
    for k in (0, 23):
        got = open_dataset(roots[k]).get_batch(np.arange(20)).to_scipy()
        names = open_dataset(roots[k]).var_names
        cols = [corpus.genes.index(g) for g in names]
        np.testing.assert_array_equal(whole[k * 20:(k + 1) * 20][:, cols].toarray(), got.toarray())
