"""The ``DataLoader`` of :mod:`deltacells.torch`: it starts each pass in the training process, hands it to its
workers, counts what it yields (for ``state_dict``) and opens the batches workers send through shared slots."""

from __future__ import annotations

import inspect
import multiprocessing
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils.data
from torch.utils.data._utils.collate import default_convert as _default_convert  # its collate_fn for batch_size=None
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory  # what the DataLoader pins batches with

from deltacells import _batch_slots, _core
from deltacells._torch_dataset import DeltaCellsIterableDataset

__all__ = ["DeltaCellsDataLoader", "make_loader"]


def _can_pin() -> bool:
    """As the DataLoader decides: pinning needs an accelerator (without one, ``pin_memory=True`` is ignored), and
    not Apple's MPS, where pinning raises."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return bool(torch.cuda.is_available())
    if not accelerator.is_available():
        return False
    current = accelerator.current_accelerator()
    return current is None or current.type != "mps"


class _EpochSampler:
    """The sampler a :class:`DeltaCellsDataLoader` shows: the ``DataLoader``'s own (an iterable dataset's constant
    sampler), plus ``set_epoch``, which trainers (Lightning's fit loop, for one) call on a loader's sampler at the
    start of every epoch; it goes to the loader, so their epoch numbers are the loader's."""

    def __init__(self, inner: Any, loader: DeltaCellsDataLoader) -> None:
        self._inner = inner
        # Weak: a cycle would keep a dropped loader, and its persistent workers, alive until the garbage collector
        # runs.
        self._loader = weakref.ref(loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._inner)

    def set_epoch(self, epoch: int) -> None:
        """Sets the loader's epoch (see :meth:`DeltaCellsIterableDataset.set_epoch`)."""
        loader = self._loader()
        if loader is not None:
            loader.set_epoch(epoch)


class DeltaCellsDataLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` of ready batches from a :class:`DeltaCellsIterableDataset` (``batch_size=None``).

    It starts each pass in the training process (the epoch, the resume point, the ranks) and hands it to its
    workers, also to persistent ones (``persistent_workers=True``) and under any ``multiprocessing_context``; it
    counts the batches it yields, so that :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch with
    workers; ``len()`` is the rank's batches for its number of workers. Batches come in the workers' turn order
    (``in_order=False`` is refused: the order would depend on timing). Every other ``DataLoader`` option is passed
    through. A ``collate_fn`` of your own is called on each batch (a dict of tensors), in the workers when there
    are some; their batches then reach the training process through the ``DataLoader``'s own pickling instead of
    the shared slots the loader otherwise decodes them into. Without workers (and without a ``collate_fn`` of your
    own) the loader takes the dataset's batches itself rather than through the ``DataLoader``'s iterator, so torch's
    profiler shows no ``enumerate(DataLoader)`` range for them.
    """

    def __init__(self, dataset: DeltaCellsIterableDataset, **kwargs: Any) -> None:
        kwargs.setdefault("batch_size", None)
        if kwargs["batch_size"] is not None:
            raise ValueError("batches are formed by the dataset: leave batch_size at None")
        if not kwargs.get("in_order", True):
            raise ValueError("in_order=False would make the order of batches depend on timing; the epoch plan, "
                             "resumption and equal ranks need the workers' turn order")
        if kwargs.get("num_workers", 0) == 0 and kwargs.get("timeout", 0) > 0:
            # The DataLoader accepts this and fails at its first iteration.
            raise ValueError("timeout applies to batches from workers: with num_workers=0 leave it at 0")
        super().__init__(dataset, **kwargs)
        dataset._check_batches(max(1, self.num_workers))
        dataset._parts = max(1, self.num_workers)
        if self.num_workers > 0:
            ctx = self.multiprocessing_context or multiprocessing.get_context()
            # [valid, *ticket] of the current pass, read by each worker as it starts the pass.
            dataset._shared = ctx.RawArray("q", 7)
        self._start = 0
        self._count = 0
        self._epoch = dataset.epoch

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        parts = max(1, self.num_workers)
        # A collate_fn of the caller's own runs in the workers on the dataset's batches as they are (dicts of
        # tensors), so they cannot come as slots then.
        slots = self.num_workers > 0 and _batch_slots.AVAILABLE and self.collate_fn is _default_convert
        ticket = ds._begin(parts, lasting=self.num_workers == 0 or self.persistent_workers, slots=slots)
        ds._handoff = ticket
        if ds._shared is not None:
            ds._shared[1:7] = list(ticket)
            ds._shared[0] = 1
        epoch, start, count = ticket[0], ticket[1], 0
        self._epoch, self._start, self._count = epoch, start, count
        if slots:
            _batch_slots.MAPS.forget_exited()
        if self.num_workers > 0 and (getattr(self, "_iterator", None) is None or not self.persistent_workers) \
                and _forks(self):
            # Workers are about to be forked. glibc keeps the tile buffers this process freed (an earlier loader's)
            # resident in its heaps, and workers forked over them spent several times the system time faulting
            # their own memory in (docs/BENCHMARKS.md, "Loader workers").
            _core.return_free_memory()
        pin = self.pin_memory and _can_pin()
        pin_device = getattr(self, "pin_memory_device", "") or None
        # Without workers, the dataset's batches come ready: the DataLoader's own iterator would only convert them
        # (a no-op for tensors) and wrap each in a profiler range, about 60 us a batch on the training thread. So
        # they are taken directly and pinned here; a collate_fn of the caller's own still goes through it.
        direct = self.num_workers == 0 and self.collate_fn is _default_convert
        if direct:
            # The one number the DataLoader's iterator draws from the loader's generator (or torch's global one)
            # as it starts, so that a training run's random numbers do not depend on this shortcut.
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        ds._running += 1  # set_epoch during the pass chooses the next pass's epoch
        try:
            for batch in (_pinned(iter(ds), pin, pin_device) if direct else super().__iter__()):
                if isinstance(batch, _batch_slots.SharedBatch):
                    batch = _batch_slots.MAPS.open(batch)
                    if pin:
                        # Every tensor of the batch (X, index, obs columns, members), as the DataLoader's pinning
                        # of a batch made in process does.
                        batch = _pin_memory(batch, pin_device)
                count += 1
                self._count = count
                ds._yielded = count  # so that the dataset's own state_dict says what the loader's does
                yield batch
        finally:
            ds._running -= 1
            ds._handoff = None
        expected = ds._rank_batches(epoch, parts) - start
        if count < expected:
            # A worker that ended without its batches (an error it could not send, a process killed): the rank
            # would train on part of its epoch, and under DDP wait for the other ranks at a collective forever.
            raise RuntimeError(
                f"the loader's workers ended after {count} of this pass's {expected} batches (epoch "
                f"{epoch}): a worker stopped early; its error, if it had one, was printed above"
            )

    def __len__(self) -> int:
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        return ds._rank_batches(ds.epoch, max(1, self.num_workers))

    @property  # type: ignore[override]
    def sampler(self) -> _EpochSampler:
        """The ``DataLoader``'s sampler with ``set_epoch`` (see :class:`_EpochSampler`)."""
        return self._epoch_sampler

    @sampler.setter
    def sampler(self, value: Any) -> None:
        self._epoch_sampler = _EpochSampler(value, self)

    def set_epoch(self, epoch: int) -> None:
        """Sets the dataset's epoch (see :meth:`DeltaCellsIterableDataset.set_epoch`): that of the next pass; a pass
        running goes on to its end as it began."""
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        ds.set_epoch(epoch)
        if not ds._running:
            self._start = self._count = 0

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the batches yielded so far in it, with the settings that fix the order."""
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        parts = max(1, self.num_workers)
        if ds._running or (ds._current is not None and not ds._fresh):
            return ds._state(self._epoch, self._start + self._count, parts)
        return ds._state(ds.epoch, ds._resume, parts)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from ``state`` (see :meth:`DeltaCellsIterableDataset.load_state_dict`); ``ValueError`` for a
        state of another number of workers once batches were yielded."""
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        ds._load(state, max(1, self.num_workers))
        self._start = self._count = 0


def _forks(loader: torch.utils.data.DataLoader) -> bool:
    """Whether the loader's workers are started by ``fork`` (its ``multiprocessing_context``, or the default)."""
    ctx = loader.multiprocessing_context or multiprocessing.get_context()
    return bool(ctx.get_start_method() == "fork")


def _pinned(batches: Iterator[Any], pin: bool, device: str | None) -> Iterator[Any]:
    """The batches, pinned as the DataLoader pins a batch made in process when ``pin``."""
    if not pin:
        yield from batches
        return
    for batch in batches:
        yield _pin_memory(batch, device)


# Options of DataLoader itself (passed through by make_loader); batch_size, shuffle and drop_last are the dataset's.
_LOADER_OPTIONS = frozenset(inspect.signature(torch.utils.data.DataLoader.__init__).parameters) - {
    "self", "dataset", "batch_size", "shuffle", "drop_last", "sampler", "batch_sampler"}


def make_loader(
    uri: Any, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False, **options: Any
) -> DeltaCellsDataLoader:
    """A ready loader: ``DeltaCellsDataLoader(DeltaCellsIterableDataset(uri, batch_size, **dataset_options),
    num_workers=num_workers, pin_memory=pin_memory, **loader_options)``, where the options of ``DataLoader``
    (``multiprocessing_context``, ``persistent_workers``, ``prefetch_factor``, ``timeout``, ``worker_init_fn``,
    ``pin_memory_device``, ...) go to the loader and the rest to the dataset. ``num_workers=0`` is the fast default
    (Rust threads fetch and decode ahead, and the next batch is gathered on a thread while the caller works on this
    one). With workers, ``persistent_workers`` defaults to ``True`` here: a
    worker's reader keeps its cache and fetches the next epoch's first tiles while the last batches are taken, where
    a worker started again each epoch begins cold."""
    loader_options = {k: options.pop(k) for k in list(options) if k in _LOADER_OPTIONS}
    if num_workers > 0:
        loader_options.setdefault("persistent_workers", True)
    ds = DeltaCellsIterableDataset(uri, batch_size, **options)
    return DeltaCellsDataLoader(ds, num_workers=num_workers, pin_memory=pin_memory, **loader_options)
