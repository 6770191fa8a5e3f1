"""A PyTorch training loader over a deltacells dataset: shuffled, split across ranks and workers, resumable.

    from deltacells.torch import make_loader
    loader = make_loader("s3://bucket/atlas", batch_size=1024, obs_columns=["cell_type"])
    for epoch in range(10):
        loader.set_epoch(epoch)            # optional: each pass is the next epoch anyway
        for batch in loader:
            x, y = batch["X"], batch["obs"]["cell_type"]        # torch sparse CSR float32, int codes

Each epoch shuffles the tiles (seeded by ``seed`` and the epoch), then the cells within windows of
``shuffle_tiles`` consecutive tiles of that order, so that I/O stays sequential (a window's tiles are fetched once)
while batches mix cells of several tiles. The order, the split into equal shares per rank (``torch.distributed``'s
rank and world size, or the ones given) and per DataLoader worker (each worker serves whole windows, so each tile is
fetched and decoded once per rank), and resumption are computed by the Rust epoch planner
(``dct_dataset::EpochPlan``), the same in every process. With several ranks or workers (and tiles enough for each
to fill two windows), each rank's worker draws its windows from about the same tiles every epoch (the tiles are dealt
into one group per rank and worker once, seeded by ``seed``; the order within a group, its windows and their cells
change every epoch), so the tiles its cache kept from one epoch serve the next; the order then depends on
``world_size`` and ``num_workers``, which every rank must share. The tiles of the batches ahead are fetched and
decoded in Rust threads while the training step runs, within a memory budget, so ``num_workers=0`` (the default)
keeps a GPU fed; with ``num_workers > 0`` each worker process opens its own reader with its share of the budget.

Epochs and resumption:

* Each pass over the dataset (or the loader) is the next epoch, unless :meth:`~DeltaCellsIterableDataset.set_epoch`
  chose one since the last pass; ``set_epoch(e)`` before each epoch, as training loops do, gives the same order.
* ``state_dict()`` (of the loader, or of the dataset when it is iterated directly) says where the epoch is;
  ``load_state_dict(state)`` makes the next pass yield exactly the batches the interrupted one had not yielded, even
  if ``set_epoch`` is then called with the same epoch; the pass after it is a whole epoch. A state whose order
  would differ (another seed, batch size, window, shuffle, ``drop_last``, ``remainder``, world size, dataset, or
  number of loader workers once batches were yielded) is refused with a ``ValueError`` naming the setting.
* Use :class:`DeltaCellsDataLoader` (or :func:`make_loader`) when ``num_workers > 0``: it gives the workers the
  epoch, the resume point and the ranks (also with ``persistent_workers=True`` and under ``spawn``), counts the
  batches it yields and sizes ``len()`` for its workers. A plain ``torch.utils.data.DataLoader`` with workers gets
  the ranks and the epoch set before it starts its workers, but neither counts batches nor advances epochs; with
  ``persistent_workers=True`` its workers never learn a later epoch, so their second pass is a ``RuntimeError``
  (rather than the first epoch's order again). Its number of workers is known only once they start, so a state
  loaded into its dataset that resumes an epoch split among another number of workers is refused there, by the
  workers' ``ValueError`` reaching the training loop.
* A state saved after an epoch's last batch resumes as the next epoch; ``set_epoch`` with the finished epoch
  after loading it serves nothing more of that epoch (a loop that saves its own epoch count does that).
"""

from __future__ import annotations

from deltacells._torch_dataset import DeltaCellsIterableDataset
from deltacells._torch_loader import DeltaCellsDataLoader, make_loader

__all__ = ["DeltaCellsDataLoader", "DeltaCellsIterableDataset", "make_loader"]
