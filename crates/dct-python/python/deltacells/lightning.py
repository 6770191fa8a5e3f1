"""A Lightning ``LightningDataModule`` over deltacells datasets and corpora.

    from deltacells.lightning import DeltaCellsDataModule
    dm = DeltaCellsDataModule(train=corpus_parts["train"], val=corpus_parts["val"], batch_size=1024, seed=0)
    trainer.fit(model, datamodule=dm)

Each dataloader is a :class:`deltacells.torch.DeltaCellsDataLoader`: the trainer's epoch reaches it through its
sampler's ``set_epoch`` (which Lightning's fit loop calls at each epoch's start), and its ``state_dict`` (the epoch
and the batches yielded) is saved in Lightning's checkpoints, since Lightning keeps the state of stateful
dataloaders; a run restored from a mid-epoch checkpoint yields exactly the batches the interrupted epoch had left.
The module's own ``state_dict`` holds the same, for trainers that save data modules instead. Needs
``pip install "deltacells[lightning]"``.
"""

from __future__ import annotations

import inspect
from typing import Any

import lightning.pytorch as pl

import deltacells
from deltacells._args import int_argument
from deltacells._torch_dataset import DEFAULT_MEMORY_BUDGET, DeltaCellsIterableDataset
from deltacells._torch_loader import _LOADER_OPTIONS
from deltacells.torch import DeltaCellsDataLoader, make_loader

__all__ = ["DeltaCellsDataModule"]


class DeltaCellsDataModule(pl.LightningDataModule):
    """Train, validation and test loaders over deltacells datasets or corpora.

    Args:
        train, val, test: each a :class:`deltacells.Corpus`, a dataset URI or a ``Backend`` (``val`` and ``test``
            optional).
        batch_size: cells per batch.
        loader_options: passed to :func:`deltacells.torch.make_loader` for every loader (``seed``,
            ``shuffle_tiles``, ``obs_columns``, ``weights``, ``num_workers``, ...); validation and test loaders are
            not shuffled (``shuffle=False``), keep short batches (``drop_last=False``) and give ranks equal batch
            counts by serving a few cells twice (``remainder="wrap"``, as PyTorch's ``DistributedSampler`` pads),
            and ``weights``, ``epoch_cells``, ``stratify_by`` and ``class_weights`` apply to training only:
            evaluation serves every one of its cells (once, on one rank, but for the fewer than ``world_size``
            cells the wrap serves on a second rank to even the ranks). ``memory_budget`` (default 2 GiB) is
            the module's: its loaders can be alive at once (the training loader keeps its cache and workers while
            validation runs), so it is split between the parts given, two shares for training and one each for
            validation and test (all of it for training alone).
    """

    def __init__(self, train: Any, val: Any = None, test: Any = None, *, batch_size: int, **loader_options: Any
                 ) -> None:
        super().__init__()
        self.sources = {"train": train, "val": val, "test": test}
        self.batch_size = int_argument("batch_size", batch_size, 1)
        self.loader_options = loader_options
        self._loaders: dict[str, DeltaCellsDataLoader] = {}
        self._pending: dict[str, Any] = {}
        # Options are checked now rather than when the trainer first asks for a loader (after its setup, in every
        # rank): a misspelled one always; against the training data (a member or column it lacks, a batch too large
        # for its cells) when that is an open Corpus. A dataset named by its location is left to be made, by
        # prepare_data say. The dataset made for the check is dropped; the ranks are left to the loaders.
        known = set(inspect.signature(DeltaCellsIterableDataset.__init__).parameters) - {"self", "uri", "batch_size"}
        unknown = sorted(set(loader_options) - known - _LOADER_OPTIONS - {"num_workers", "pin_memory"})
        if unknown:
            raise TypeError(f"DeltaCellsDataModule got options no loader takes: {unknown}; see "
                            "help(deltacells.torch.make_loader)")
        if isinstance(train, deltacells.Corpus):
            options = self._options("train")
            for name in ("num_workers", "pin_memory", *(k for k in list(options) if k in _LOADER_OPTIONS)):
                options.pop(name, None)
            DeltaCellsIterableDataset(train, self.batch_size, **options)

    def _options(self, part: str) -> dict[str, Any]:
        """The options of ``part``'s loader."""
        options = dict(self.loader_options)
        # Each loader's share of the module's budget, so that loaders alive together stay within it.
        shares = {"train": 2, "val": 1, "test": 1}
        given = sum(shares[p] for p, s in self.sources.items() if s is not None)
        budget = int(options.get("memory_budget", DEFAULT_MEMORY_BUDGET))
        options["memory_budget"] = budget * shares[part] // given
        if part != "train":
            options["shuffle"] = False
            # Every evaluation cell: none left out of a short batch or a rank's share (a few served twice so that
            # ranks have as many batches); the training draws (member weights, balanced categories) are training's.
            options["drop_last"] = False
            options["remainder"] = "wrap"
            for drawing in ("weights", "epoch_cells", "stratify_by", "class_weights"):
                options.pop(drawing, None)
        return options

    def _loader(self, part: str) -> DeltaCellsDataLoader:
        if part not in self._loaders:
            source = self.sources[part]
            if source is None:
                raise ValueError(f"this data module has no {part} data")
            self._loaders[part] = make_loader(source, self.batch_size, **self._options(part))
        loader = self._loaders[part]
        if part in self._pending:
            loader.load_state_dict(self._pending.pop(part))
        return loader

    def train_dataloader(self) -> DeltaCellsDataLoader:
        """The training loader (the same object for every epoch: it keeps its epoch and position)."""
        return self._loader("train")

    def val_dataloader(self) -> DeltaCellsDataLoader | list[Any]:
        """The validation loader, in cell order (none, ``[]``, without validation data)."""
        return [] if self.sources["val"] is None else self._loader("val")

    def test_dataloader(self) -> DeltaCellsDataLoader | list[Any]:
        """The test loader, in cell order (none, ``[]``, without test data)."""
        return [] if self.sources["test"] is None else self._loader("test")

    def state_dict(self) -> dict[str, Any]:
        """Where the training loader is (its ``state_dict``)."""
        if "train" in self._loaders:
            return {"train": self._loaders["train"].state_dict()}
        return {k: v for k, v in self._pending.items() if k == "train"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resumes the training loader from ``state_dict`` (now, or when it is made)."""
        if "train" in state_dict:
            self._pending["train"] = state_dict["train"]
            if "train" in self._loaders:
                self._loader("train")
