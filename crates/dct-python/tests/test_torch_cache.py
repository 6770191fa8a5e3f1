"""The training loader's tile cache across epochs: of the tiles an epoch is done with, the reader keeps those the
next epoch reads first (``DeltaCellsDataset.plan_passes``, given each epoch from its plan and the next epoch's), so a
cache that holds C of a reader's N tiles decodes about N - C tiles an epoch after the first. Evicting the least
recently used instead keeps mostly tiles the next epoch reads late, evicted again before it gets to them: nearly N.
Tested through each way the loader is driven: ``make_loader`` without workers, the dataset iterated directly, and
persistent DataLoader workers (counted by a backend logging its reads across processes), and over a corpus."""

import numpy as np
import pytest
from conftest import LoggingBackend, make_counts, require, same, write_dataset

torch = require("torch")

import deltacells  # noqa: E402
from deltacells.torch import DeltaCellsIterableDataset, make_loader  # noqa: E402

N_TILES, TILE, G = 40, 20, 30
N = N_TILES * TILE
WINDOW = 2
EPOCHS = 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    full = make_counts(N, G, density=0.3, seed=17)
    # Gene names, so that the dataset can also be a corpus's member.
    names = [f"g{g}" for g in range(G)]
    return write_dataset(tmp_path_factory.mktemp("cache") / "ds", full, TILE, var_names=names), full


def budget_caching(source, tiles: int) -> int:
    """The smallest memory budget for which the reader (or a corpus's readers) of a loader over ``source`` caches
    ``tiles`` decoded tiles (the budget also covers the batches held, so it is found from the reader the loader
    opens)."""
    def cached(budget: int) -> int:
        return make_loader(source, 16, memory_budget=budget, shuffle_tiles=WINDOW).dataset.dataset.max_cached_tiles

    lo, hi = 1 << 12, 1 << 28
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if cached(mid) < tiles else (lo, mid)
    assert cached(lo) == tiles
    return lo


def later_epochs_bound(tiles: int, cached: int) -> int:
    """Tiles a reader of ``tiles`` tiles holding ``cached`` decodes in an epoch after the first, at most: those it
    could not keep, and the places of the window being read, the tile decoded ahead and the next window (the
    reader's budget model), which hold no tile kept for the next epoch."""
    return tiles - cached + 2 * WINDOW + 1


def decoded_per_epoch(reader, epochs) -> list[int]:
    counts = []
    for run in epochs:
        before = reader.stats["tiles_decoded"]
        run()
        counts.append(int(reader.stats["tiles_decoded"] - before))
    return counts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_without_workers_an_epoch_decodes_only_the_tiles_its_cache_could_not_keep(built, seed):
    root, full = built
    cached = N_TILES // 2
    loader = make_loader(root, 16, num_workers=0, seed=seed, shuffle_tiles=WINDOW,
                         memory_budget=budget_caching(root, cached))
    reader = loader.dataset.dataset
    assert reader.max_cached_tiles == cached

    def epoch(e):
        def run():
            loader.set_epoch(e)
            rows = {}
            for b in loader:
                rows.update(zip(b["index"].tolist(), b["X"].to_dense().numpy()))
            assert sorted(rows) == list(range(N))
            assert same(np.stack([rows[i] for i in range(N)]), full.toarray())
        return run

    counts = decoded_per_epoch(reader, [epoch(e) for e in range(EPOCHS)])
    assert counts[0] >= N_TILES, counts
    assert all(c <= later_epochs_bound(N_TILES, cached) for c in counts[1:]), counts


@pytest.mark.parametrize("seed", [1, 2])
def test_the_dataset_iterated_directly_keeps_the_next_epoch_s_first_tiles(built, seed):
    """A loop over the dataset itself, which moves to the next epoch at each pass."""
    root, _ = built
    cached = 3 * N_TILES // 4
    ds = DeltaCellsIterableDataset(root, 16, seed=seed, shuffle_tiles=WINDOW,
                                   memory_budget=budget_caching(root, cached))
    reader = ds.dataset
    assert reader.max_cached_tiles == cached

    def run():
        assert sum(len(b["index"]) for b in ds) == N

    counts = decoded_per_epoch(reader, [run] * EPOCHS)
    assert all(c <= later_epochs_bound(N_TILES, cached) for c in counts[1:]), counts


def test_a_wrong_next_pass_costs_only_cache_hits(built):
    """The order is a hint: tiles the next pass does not read, or read in another order, leave every batch
    intact; a tile that does not exist is an IndexError naming it."""
    root, full = built
    reader = deltacells.DeltaCellsDataset(root, max_cached_tiles=3)
    reader.plan_passes([5, 5, 0], [39, 2])
    rng = np.random.default_rng(0)
    for _ in range(4):
        cells = rng.permutation(N)[:200]
        batch = reader.get_batch(cells)
        assert same(batch.to_scipy(), full[cells])
    with pytest.raises(IndexError, match="tile 40"):
        reader.plan_passes([1], [40])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_each_decode_only_the_tiles_their_cache_could_not_keep(built, tmp_path, context):
    """Each of 2 workers reads its own group of about half the tiles every epoch, with half the budget: over the
    epochs after the first, the two fetch (and decode) at most what their caches could not keep. A cache tile
    evicted is fetched again: the log counts the decodes."""
    root, _ = built
    cached = 3 * N_TILES // 8  # of each worker's 20 tiles
    log = tmp_path / "reads.log"
    loader = make_loader(LoggingBackend(root, str(log)), 16, num_workers=2, seed=4, shuffle_tiles=WINDOW,
                         memory_budget=2 * budget_caching(root, cached), multiprocessing_context=context)
    counts = []
    for e in range(EPOCHS):
        before = len(log.read_text().split()) if log.exists() else 0
        loader.set_epoch(e)
        assert sum(len(b["index"]) for b in loader) == N
        counts.append(sum(1 for line in log.read_text().split()[before:] if line.startswith("tiles/")))
    # Equal tiles: each worker's group holds half of them.
    assert counts[0] >= N_TILES, counts
    assert all(c <= 2 * later_epochs_bound(N_TILES // 2, cached) for c in counts[1:]), counts


@pytest.mark.parametrize(("workers", "context", "seed"), [(0, None, 1), (0, None, 2), (2, "fork", 1), (2, "spawn", 1)])
def test_a_corpus_keeps_tiles_for_the_next_epoch_within_its_budget(built, tmp_path, workers, context, seed):
    """A corpus's members give back, at each window, the tiles no window ahead needs, so that their caches together
    keep to the budget; of the others they keep those read soonest, within the cache size the budget gives. Each
    epoch after the first then decodes about the tiles the cache could not keep, where giving every tile back
    decoded every tile every epoch. In the training process and in persistent DataLoader workers (each with its
    share of the budget and its group of tiles), forked and spawned. Counted by a backend logging each member's
    reads; rows against the source."""
    root, full = built
    log = tmp_path / "reads.log"
    members = {"a": LoggingBackend(root, str(log)), "b": LoggingBackend(root, str(log))}
    corpus = deltacells.open_corpus(members)
    tiles = 2 * N_TILES
    readers = max(1, workers)
    group = tiles // readers  # equal tiles: each worker's group holds as many
    cached = 3 * group // 4
    extra = {} if context is None else {"multiprocessing_context": context}
    loader = make_loader(corpus, 16, num_workers=workers, seed=seed, shuffle_tiles=WINDOW,
                         memory_budget=readers * budget_caching(corpus, cached), **extra)
    reader = make_loader(corpus, 16, shuffle_tiles=WINDOW, memory_budget=budget_caching(corpus, cached)).dataset.dataset
    assert reader.max_cached_tiles == cached
    counts = []
    for e in range(EPOCHS):
        before = len(log.read_text().split()) if log.exists() else 0
        loader.set_epoch(e)
        rows = {}
        for b in loader:
            rows.update(zip(b["index"].tolist(), b["X"].to_dense().numpy()))
        assert sorted(rows) == list(range(2 * N))
        assert same(np.stack([rows[i] for i in range(2 * N)]), np.vstack([full.toarray()] * 2))
        counts.append(sum(1 for line in log.read_text().split()[before:] if line.startswith("tiles/")))
    assert counts[0] >= tiles, counts
    # Kept beside the windows ahead (up to the prefetch depth and a window) and one more window's tiles.
    kept = cached - (reader.ahead + 2 * WINDOW)
    assert all(c <= readers * (group - kept + 2 * WINDOW + 1) for c in counts[1:]), (counts, kept)
