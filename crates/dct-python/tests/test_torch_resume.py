"""deltacells.torch resumption, every way a training loop calls it: the state taken from the dataset iterated
directly and from the loader (with and without workers, persistent or not), ``set_epoch`` after ``load_state_dict``
or never, and the states that must be refused."""

import pytest
from conftest import make_counts, require, write_dataset

torch = require("torch")

from deltacells import Corpus, open_corpus  # noqa: E402
from deltacells.torch import DeltaCellsDataLoader, DeltaCellsIterableDataset, make_loader  # noqa: E402

N, G, TILE = 470, 40, 50  # 10 tiles, the last of 20
OPTS = dict(seed=11, shuffle_tiles=2)
BATCH = 24


NAMES = [f"g{g}" for g in range(G)]  # so that the dataset can be a corpus's member


@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory):
    full = make_counts(N, G, density=0.2, seed=61)
    return write_dataset(tmp_path_factory.mktemp("resume") / "ds", full, TILE, var_names=NAMES)


@pytest.fixture(scope="module", params=["dataset", "corpus"])
def root(request, dataset_root, tmp_path_factory):
    """What the loader reads: the dataset, or a corpus of it and a second dataset of 230 cells (15 tiles)."""
    if request.param == "dataset":
        return dataset_root
    other = make_counts(230, G, density=0.2, seed=65)
    second = write_dataset(tmp_path_factory.mktemp("resume2") / "ds", other, TILE, var_names=NAMES)
    return open_corpus({"a": dataset_root, "b": second})


def n_cells(root):
    return root.n_cells if isinstance(root, Corpus) else N


def cells(batches):
    return [b["index"].tolist() for b in batches]


def direct(root, **kw):
    return DeltaCellsIterableDataset(root, BATCH, **OPTS, **kw)


def loader(root, workers, **kw):
    return make_loader(root, BATCH, num_workers=workers, **OPTS, **kw)


def plain(root, **kw):
    return torch.utils.data.DataLoader(direct(root, **kw), batch_size=None, num_workers=0)


# Each way of iterating: (make it, its state holder, its number of workers).
WAYS = {
    "dataset": lambda root: direct(root),
    "plain DataLoader": lambda root: plain(root),
    "loader, 0 workers": lambda root: loader(root, 0),
    "loader, 2 workers": lambda root: loader(root, 2, persistent_workers=False),
    "loader, 2 persistent workers": lambda root: loader(root, 2, persistent_workers=True),
}


def holder(it):
    """What has state_dict / set_epoch: the dataset for a plain DataLoader, else the object itself."""
    return it.dataset if type(it) is torch.utils.data.DataLoader else it


def interrupted_then_resumed(root, way, k, *, set_epoch_after_load, epoch=2):
    """Epoch `epoch` interrupted after `k` batches; a new object loads the state and runs the rest (with or without
    set_epoch(epoch) before it), then one more pass (set_epoch(epoch + 1) before it, or not)."""
    first = WAYS[way](root)
    holder(first).set_epoch(epoch)
    it = iter(first)
    got = [next(it) for _ in range(k)]
    state = holder(first).state_dict()
    del it, got
    again = WAYS[way](root)
    holder(again).load_state_dict(state)
    if set_epoch_after_load:
        holder(again).set_epoch(epoch)
    rest = cells(again)
    if set_epoch_after_load:
        holder(again).set_epoch(epoch + 1)
    after = cells(again)
    return state, rest, after


def uninterrupted(root, way, *, epoch=2, set_epochs=True):
    whole = WAYS[way](root)
    holder(whole).set_epoch(epoch)
    a = cells(whole)
    if set_epochs:
        holder(whole).set_epoch(epoch + 1)
    return a, cells(whole)


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("set_epoch_after_load", [True, False], ids=["set_epoch", "no set_epoch"])
def test_a_resumed_epoch_finishes_as_the_uninterrupted_one_and_the_next_is_whole(root, way, set_epoch_after_load):
    epoch, next_epoch = uninterrupted(root, way, set_epochs=set_epoch_after_load)
    assert len(epoch) == len(WAYS[way](root)) and epoch != next_epoch
    assert sorted(sum(next_epoch, [])) == list(range(n_cells(root))), "the next epoch is whole"
    for k in (1, 5, len(epoch) - 1):
        state, rest, after = interrupted_then_resumed(root, way, k, set_epoch_after_load=set_epoch_after_load)
        assert state["epoch"] == 2 and state["batches"] == k, "the batch in the caller's hands is counted"
        assert rest == epoch[k:], f"{way}: the rest of the epoch after {k}"
        assert after == next_epoch, f"{way}: the epoch after the resumed one is whole"


@pytest.mark.parametrize("workers", [0, 2])
def test_the_state_taken_from_the_loader_s_dataset_is_the_loader_s(root, workers):
    """``loader.dataset.state_dict()`` says what ``loader.state_dict()`` says, also when workers iterate copies of
    the dataset, and a new loader whose dataset loads it finishes the epoch as the uninterrupted one."""
    epoch, _ = uninterrupted(root, "loader, 2 workers" if workers else "loader, 0 workers")
    for k in (1, 5):
        first = loader(root, workers)
        first.set_epoch(2)
        it = iter(first)
        for _ in range(k):
            next(it)
        state = first.dataset.state_dict()
        assert state == first.state_dict() and state["batches"] == k
        del it
        again = loader(root, workers)
        again.dataset.load_state_dict(state)
        assert cells(again) == epoch[k:], f"{workers} workers: the rest after {k}"


@pytest.mark.parametrize("way", list(WAYS))
def test_each_pass_without_set_epoch_is_the_next_epoch(root, way):
    it = WAYS[way](root)
    a, b = cells(it), cells(it)
    ref = WAYS[way](root)
    holder(ref).set_epoch(1)
    assert a != b and b == cells(ref), "the second pass is epoch 1"


def test_a_state_at_the_end_of_an_epoch_resumes_with_the_next_one(root):
    ds = direct(root)
    ds.set_epoch(4)
    n = len(list(ds))
    state = ds.state_dict()
    assert (state["epoch"], state["batches"]) == (5, 0), n
    again = direct(root)
    again.load_state_dict(state)
    ref = direct(root)
    ref.set_epoch(5)
    assert cells(again) == cells(ref)


@pytest.mark.parametrize("way", list(WAYS))
def test_a_state_saved_after_an_epoch_s_last_batch_serves_nothing_more_of_it(root, way):
    """A loop that saves its own epoch count with the loader's state at every step, stopped after the last step
    of epoch 2, calls ``set_epoch(2)`` again when it restarts: nothing of epoch 2 is left, and epoch 3 is whole; a
    loop that does not call ``set_epoch`` goes on with epoch 3."""
    epoch, next_epoch = uninterrupted(root, way)
    k = len(epoch)
    state, rest, after = interrupted_then_resumed(root, way, k, set_epoch_after_load=True)
    assert (state["epoch"], state["batches"], state["after_epoch"]) == (3, 0, 2)
    assert rest == [], f"{way}: epoch 2 served again"
    assert after == next_epoch
    _, rest, _ = interrupted_then_resumed(root, way, k, set_epoch_after_load=False)
    assert rest == next_epoch, f"{way}: without set_epoch, the pass after the state is epoch 3"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_follow_set_epoch_and_load_state_dict(root, context):
    """Persistent workers keep their copy of the dataset between passes: the epoch and resume point reach them
    through the loader (under spawn the shared memory goes along when the workers are started)."""
    persistent = loader(root, 2, persistent_workers=True, multiprocessing_context=context)
    fresh = loader(root, 2)
    for e in (0, 1, 0, 3):
        persistent.set_epoch(e)
        fresh.set_epoch(e)
        assert cells(persistent) == cells(fresh), f"epoch {e}"
    fresh.set_epoch(3)
    whole = cells(fresh)
    persistent.load_state_dict({**persistent.state_dict(), "epoch": 3, "batches": 4})
    assert cells(persistent) == whole[4:]
    ref = loader(root, 2)
    ref.set_epoch(4)
    assert cells(persistent) == cells(ref), "the pass after the resumed one is the next epoch, whole"


@pytest.mark.parametrize(
    "change",
    [dict(seed=12), dict(shuffle=False), dict(drop_last=True), dict(remainder="wrap", rank=0, world_size=2),
     dict(shuffle_tiles=3), dict(batch_size=25), dict(rank=0, world_size=2)],
    ids=lambda c: ",".join(c),
)
def test_a_state_whose_order_would_differ_is_refused(dataset_root, change):
    root = dataset_root
    ds = direct(root)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    kw = {**OPTS, "batch_size": BATCH, **change}
    other = DeltaCellsIterableDataset(root, kw.pop("batch_size"), **kw)
    with pytest.raises(ValueError) as e:
        other.load_state_dict(state)
    # The first setting that differs, in the state's order (remainder before world_size), is the one named.
    named = [k for k in change if k != "rank"]
    assert f"{named[0]}=" in str(e.value), str(e.value)


def test_a_state_lacking_its_settings_or_past_its_epoch_is_refused(dataset_root):
    """A state whose order cannot be checked (settings missing) or that counts batches its epoch does not have is
    not a state of this loader: resuming from it would serve other batches, or none, silently."""
    ds = direct(dataset_root)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    del it
    gone = object()
    for change, message in (({"seed": gone}, "lacks seed"), ({"batch_size": gone}, "lacks batch_size"),
                            ({"batches": 10**6}, "counts 1000000 batches of epoch 0, which has 20"),
                            ({"batches": -3}, "batches = -3: must be at least 0"),
                            ({"epoch": -1}, "epoch = -1: must be at least 0")):
        bad = {k: v for k, v in {**state, **change}.items() if v is not gone}
        with pytest.raises(ValueError, match=message):
            direct(dataset_root).load_state_dict(bad)
    with pytest.raises(ValueError, match="lacks"):
        direct(dataset_root).load_state_dict({"epoch": 0, "batches": 3})
    with pytest.raises(TypeError, match="batches must be an integer"):
        direct(dataset_root).load_state_dict({**state, "batches": 1.5})


def test_a_state_of_another_dataset_is_refused(dataset_root, tmp_path):
    ds = direct(dataset_root)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    # Same tile layout, other counts: the manifest differs.
    full = make_counts(N, G, density=0.2, seed=62)
    with pytest.raises(ValueError, match="another dataset"):
        direct(write_dataset(tmp_path / "other", full, TILE)).load_state_dict(state)
    # Another tile layout.
    with pytest.raises(ValueError, match="tile layout"):
        direct(write_dataset(tmp_path / "wide", full, TILE * 2)).load_state_dict(state)


def test_a_resume_with_another_number_of_workers_is_refused_once_batches_were_yielded(root):
    two = loader(root, 2)
    it = iter(two)
    next(it)
    state = two.state_dict()
    assert state["num_workers"] == 2
    for workers in (0, 3):
        with pytest.raises(ValueError, match="num_workers=2"):
            loader(root, workers).load_state_dict(state)
    # Nothing yielded yet: any number of workers starts the epoch.
    fresh = loader(root, 2)
    fresh.set_epoch(6)
    three = loader(root, 3)
    three.load_state_dict(fresh.state_dict())
    assert sorted(sum(cells(three), [])) == list(range(n_cells(root)))
    # 0 and 1 workers are the same split.
    zero = loader(root, 0)
    it = iter(zero)
    next(it)
    loader(root, 1).load_state_dict(zero.state_dict())


def state_after(it, k, epoch=2):
    """The state of loader `it` after `k` batches of epoch `epoch`."""
    it.set_epoch(epoch)
    batches = iter(it)
    for _ in range(k):
        next(batches)
    state = it.state_dict()
    del batches
    return state


def test_a_plain_dataloader_s_workers_refuse_the_rest_of_an_epoch_split_otherwise(root):
    """A plain DataLoader's number of workers is known only in its workers: a state counting batches of an epoch
    split among another number of workers is refused there (the error reaches the loop), not served as some other
    rest of the epoch; with as many workers (0 and 1 are one split) it is exactly the rest."""
    epoch, _ = uninterrupted(root, "loader, 0 workers")
    state = state_after(loader(root, 0), 3)
    again = direct(root)
    again.load_state_dict(state)
    with pytest.raises(ValueError, match="num_workers=2"):
        list(torch.utils.data.DataLoader(again, batch_size=None, num_workers=2))
    again = direct(root)
    again.load_state_dict(state)
    assert cells(torch.utils.data.DataLoader(again, batch_size=None, num_workers=1)) == epoch[3:]
    # A state saved after the epoch's last batch, with set_epoch of that epoch: nothing left, whatever the split.
    end = direct(root)
    end.set_epoch(2)
    list(end)
    again = direct(root)
    again.load_state_dict(end.state_dict())
    again.set_epoch(2)
    assert cells(torch.utils.data.DataLoader(again, batch_size=None, num_workers=2)) == []


def test_a_state_saved_with_workers_resumes_in_a_plain_dataloader_with_as_many(root):
    """The dataset a plain DataLoader iterates does not know its number of workers when it loads a state: it takes a
    state of 2 workers' split, whose rest its 2 workers then serve exactly; iterated directly (one part) it refuses
    it when the pass begins, naming the number."""
    two = loader(root, 2, persistent_workers=False)
    two.set_epoch(2)
    epoch = cells(two)
    state = state_after(two, 3)
    again = direct(root)
    again.load_state_dict(state)
    assert cells(torch.utils.data.DataLoader(again, batch_size=None, num_workers=2)) == epoch[3:]
    alone = direct(root)
    alone.load_state_dict(state)
    with pytest.raises(ValueError, match="use num_workers=2"):
        next(iter(alone))


@pytest.mark.parametrize("way", list(WAYS))
def test_set_epoch_during_a_pass_sets_the_next_one_and_the_pass_ends_as_it_began(root, way):
    """A loop that calls ``set_epoch`` for a later epoch before its pass is over: the pass finishes whole, in its
    own epoch's order, its state until then is its own, and the next pass is the epoch set."""
    epoch4, _ = uninterrupted(root, way, epoch=4)
    epoch7, _ = uninterrupted(root, way, epoch=7)
    it = WAYS[way](root)
    holder(it).set_epoch(4)
    got = []
    for i, batch in enumerate(it):
        got.append(batch["index"].tolist())
        if i == 2:
            holder(it).set_epoch(7)
        if 2 <= i < len(epoch4) - 1:  # (a state after the last batch is that of the epoch after it, see above)
            state = holder(it).state_dict()
            assert (state["epoch"], state["batches"]) == (4, i + 1), "the pass under way keeps its own state"
    assert got == epoch4
    state = holder(it).state_dict()
    assert (state["epoch"], state["batches"]) == (7, 0)
    assert cells(it) == epoch7


def test_in_order_false_and_a_batch_size_are_refused(dataset_root):
    root = dataset_root
    ds = direct(root)
    with pytest.raises(ValueError, match="in_order"):
        DeltaCellsDataLoader(ds, num_workers=2, in_order=False)
    with pytest.raises(ValueError, match="batch_size"):
        DeltaCellsDataLoader(ds, batch_size=4)
