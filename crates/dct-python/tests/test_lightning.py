"""The Lightning DataModule: a tiny model trained for two epochs over a corpus with ``Trainer(max_epochs=2)``, and
the same run interrupted mid-epoch and restored from its checkpoint: the cells trained on are the same, batch for
batch."""

import gc

import numpy as np
import pytest
from conftest import make_counts, require

torch = require("torch")
pl = require("lightning.pytorch")

from deltacells import DatasetWriter, open_corpus  # noqa: E402
from deltacells.lightning import DeltaCellsDataModule  # noqa: E402


class Stop(Exception):
    pass


@pytest.fixture(autouse=True)
def collect_after():
    """A Trainer keeps its last batch in reference cycles until the garbage collector runs; collecting after each
    test gives its memory (a slot of the process's batch pool) back before the next test."""
    yield
    gc.collect()


class Tiny(pl.LightningModule):
    """A linear model of the counts; it records the cells of every batch it trains on."""

    def __init__(self, n_genes: int, stop_at: int | None = None, checkpoint: str | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(n_genes, 1)
        self.seen: list[list[int]] = []
        self.stop_at, self.checkpoint = stop_at, checkpoint

    def training_step(self, batch, _):
        self.seen.append(batch["index"].tolist())
        x = batch["X"].to_dense()
        return self.layer(x).pow(2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.stop_at is not None and self.global_step == self.stop_at:
            self.trainer.save_checkpoint(self.checkpoint)
            raise Stop

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def trainer() -> pl.Trainer:
    return pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("members")
    roots = []
    for i, (n, genes) in enumerate([(150, [f"g{j}" for j in range(30)]), (120, [f"g{j}" for j in range(29, 4, -1)])]):
        root = str(d / f"m{i}")
        x = make_counts(n, len(genes), density=0.2, seed=i)
        with DatasetWriter(root, n_genes=len(genes), tile_size=40, level=3, var_names=genes) as w:
            for lo in range(0, n, 40):
                w.add_tile(x[lo : lo + 40])
        roots.append(root)
    return open_corpus(roots)


def test_two_epochs_and_a_restart_from_a_mid_epoch_checkpoint(corpus, tmp_path):
    whole = Tiny(corpus.n_genes)
    trainer().fit(whole, datamodule=DeltaCellsDataModule(corpus, batch_size=16, seed=3))
    per_epoch = -(-corpus.n_cells // 16)
    assert len(whole.seen) == 2 * per_epoch
    for e in range(2):
        cells = sorted(c for b in whole.seen[e * per_epoch : (e + 1) * per_epoch] for c in b)
        assert cells == list(range(corpus.n_cells)), f"epoch {e} covers every cell once"
    assert whole.seen[:per_epoch] != whole.seen[per_epoch:], "the second epoch is another order"

    checkpoint = str(tmp_path / "mid.ckpt")
    first = Tiny(corpus.n_genes, stop_at=per_epoch // 2, checkpoint=checkpoint)
    with pytest.raises(Stop):
        trainer().fit(first, datamodule=DeltaCellsDataModule(corpus, batch_size=16, seed=3))
    resumed = Tiny(corpus.n_genes)
    trainer().fit(resumed, datamodule=DeltaCellsDataModule(corpus, batch_size=16, seed=3), ckpt_path=checkpoint)
    assert first.seen + resumed.seen == whole.seen, "the restored run trains on the cells the whole run did"


@pytest.mark.parametrize("workers", [0, 2])
def test_val_and_test_loaders_are_in_cell_order(corpus, workers):
    dm = DeltaCellsDataModule(corpus, val=corpus, test=corpus, batch_size=50, seed=1, num_workers=workers)
    val_loader = dm.val_dataloader()
    assert not isinstance(val_loader, list)
    val = np.concatenate([b["index"].numpy() for b in val_loader])
    assert list(val) == list(range(corpus.n_cells))
    assert dm.test_dataloader() is dm.test_dataloader()
    assert DeltaCellsDataModule(corpus, batch_size=5).test_dataloader() == [], "no test data: no loader"


@pytest.mark.parametrize("budget", [None, 300 << 20])
def test_the_loaders_share_the_module_s_memory_budget(corpus, budget):
    given = {} if budget is None else {"memory_budget": budget}
    whole = budget or (2 << 30)
    dm = DeltaCellsDataModule(corpus, val=corpus, test=corpus, batch_size=16, seed=1, **given)
    parts = [dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()]
    assert [p.dataset.memory_budget for p in parts] == [whole // 2, whole // 4, whole // 4]
    dm = DeltaCellsDataModule(corpus, val=corpus, batch_size=16, seed=1, **given)
    assert [dm.train_dataloader().dataset.memory_budget, dm.val_dataloader().dataset.memory_budget] == [
        whole * 2 // 3, whole // 3]
    assert DeltaCellsDataModule(corpus, batch_size=16, **given).train_dataloader().dataset.memory_budget == whole


@pytest.mark.parametrize(("options", "error", "says"), [
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 16, "weights": {"nobody": 1.0}}, ValueError, "members the corpus does not have"),
    ({"batch_size": 16, "stratify_by": "no_such_column"}, KeyError, "no_such_column"),
    ({"batch_size": 16, "shufle": False}, TypeError, "shufle"),
    ({"batch_size": 10_000}, ValueError, "no batches"),
])
def test_options_the_data_cannot_take_are_refused_when_the_module_is_made(corpus, options, error, says):
    """Not when the trainer first asks for a loader (after its setup, and in every rank)."""
    with pytest.raises(error, match=says):
        DeltaCellsDataModule(corpus, **{"drop_last": True, **options})


def test_data_made_later_or_evaluation_parts_without_cells_do_not_stop_the_module_being_made(corpus, tmp_path):
    """Lightning's prepare_data makes data after the module: a dataset named by a location that does not exist yet
    is checked when its loader is made; an empty validation part, when validation asks for it."""
    later = DeltaCellsDataModule(str(tmp_path / "made-by-prepare-data"), batch_size=16)
    with pytest.raises(FileNotFoundError):
        later.train_dataloader()
    with pytest.raises(TypeError, match="shufle"):
        DeltaCellsDataModule(str(tmp_path / "made-by-prepare-data"), batch_size=16, shufle=False)
    DeltaCellsDataModule(corpus, val=corpus.select([]), batch_size=16)


def test_len_plans_a_weighted_epoch_once(corpus):
    """Trainers ask len() several times an epoch; a weighted epoch's plan is made once for it."""
    loader = DeltaCellsDataModule(corpus, batch_size=16, weights=[1, 2]).train_dataloader()
    ds = loader.dataset
    made, plan = [], ds._plan
    ds._plan = lambda *a, **k: (made.append(a), plan(*a, **k))[1]
    ds.set_epoch(1)
    assert len(loader) == len(loader) == len(ds) > 0 and len(made) == 1, "another epoch: planned once"
    ds.set_epoch(0)
    assert len(loader) == len(ds) > 0 and len(made) == 1, "the epoch before: its count kept"


def test_the_trainer_s_epoch_reaches_the_loader_through_its_sampler(corpus):
    from lightning.fabric.utilities.data import _set_sampler_epoch

    loader = DeltaCellsDataModule(corpus, batch_size=16, seed=3).train_dataloader()
    _set_sampler_epoch(loader, 5)  # what Lightning's fit loop calls at each epoch's start
    assert loader.dataset.epoch == 5 and loader.state_dict()["epoch"] == 5


def test_evaluation_serves_each_cell_once_whatever_the_training_draws(tmp_path):
    """Weights and stratification are training's: with them in the options, the validation loader still serves
    each of its cells once, in cell order (cells without the stratifying category included)."""
    pd = require("pandas")
    from deltacells.obs import ObsSchema

    roots = []
    for i, n in enumerate([90, 60]):
        root = str(tmp_path / f"m{i}")
        x = make_counts(n, 12, density=0.3, seed=10 + i)
        labels = ["rare" if j % 10 == 0 else "common" for j in range(n)]
        obs = pd.DataFrame({"kind": pd.Categorical([None if j % 7 == 3 else v for j, v in enumerate(labels)])})
        with DatasetWriter(root, n_genes=12, tile_size=30, level=3, var_names=[f"g{j}" for j in range(12)],
                           obs_schema=ObsSchema.infer([obs])) as w:
            for lo in range(0, n, 30):
                w.add_tile(x[lo : lo + 30], obs.iloc[lo : lo + 30].reset_index(drop=True))
        roots.append(root)
    members = open_corpus(roots, cache_dir=str(tmp_path / "cache"))
    for drawing in ({"stratify_by": "kind"}, {"stratify_by": "kind", "class_weights": {"rare": 1, "common": 1}},
                    {"weights": [3, 1], "epoch_cells": 40}):
        dm = DeltaCellsDataModule(members, val=members, test=members, batch_size=16, seed=2, **drawing)
        for loader in (dm.val_dataloader(), dm.test_dataloader()):
            cells = np.concatenate([b["index"].numpy() for b in loader])
            assert list(cells) == list(range(members.n_cells)), drawing
        train = np.concatenate([b["index"].numpy() for b in dm.train_dataloader()])
        assert list(train) != list(range(members.n_cells)), f"training draws as asked: {drawing}"


@pytest.mark.parametrize("options", [{"drop_last": True}, {"drop_last": True, "remainder": "drop"},
                                     {"remainder": "drop"}])
def test_evaluation_serves_every_cell_whatever_the_training_s_drop_last_and_remainder(corpus, options):
    """``drop_last`` and ``remainder="drop"`` are for training: with them in the options, the evaluation loaders
    still serve every cell, on one rank in order and over four ranks each cell on some rank with equal batch counts
    (a few cells twice, as ``DistributedSampler`` pads)."""
    n = corpus.n_cells
    assert n % 32 and n % 4, "the batch size and the ranks leave a remainder"
    dm = DeltaCellsDataModule(corpus, val=corpus, batch_size=32, seed=1, **options)
    cells = np.concatenate([b["index"].numpy() for b in dm.val_dataloader()])
    assert list(cells) == list(range(n)), options
    served, counts = [], []
    for rank in range(4):
        ranked = DeltaCellsDataModule(corpus, val=corpus, batch_size=32, seed=1, rank=rank, world_size=4, **options)
        batches = [b["index"].numpy() for b in ranked.val_dataloader()]
        counts.append(len(batches))
        served.append(np.concatenate(batches))
    assert len(set(counts)) == 1, f"equal batch counts on every rank: {counts}"
    every = np.concatenate(served)
    assert set(every.tolist()) == set(range(n)), options
    assert len(every) - n < 4, "at most world_size - 1 cells twice"
    # Training keeps what was asked: drop_last leaves the short batch out.
    if options.get("drop_last"):
        train = [b["index"].numpy() for b in dm.train_dataloader()]
        assert all(len(b) == 32 for b in train) and sum(map(len, train)) < n
