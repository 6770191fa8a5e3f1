"""A PyTorch training loader over a deltacells dataset: shuffled, split across ranks and workers, resumable.

    from deltacells.torch import make_loader
    loader = make_loader("s3://bucket/atlas", batch_size=1024, obs_columns=["cell_type"])
    for epoch in range(10):
        loader.set_epoch(epoch)
        for batch in loader:
            x, y = batch["X"], batch["obs"]["cell_type"]        # torch sparse CSR float32, int codes

Each epoch shuffles the tiles (seeded by ``seed`` and the epoch), then the cells within windows of
``shuffle_tiles`` consecutive tiles of that order, so that I/O stays sequential (a window's tiles are fetched once)
while batches mix cells of several tiles. The order, the split into equal shares per rank (``torch.distributed``'s
rank and world size, or the ones given) and per DataLoader worker, and resumption are computed by the Rust epoch
planner (``dct_dataset::EpochPlan``), the same in every process. The tiles of the batches ahead are fetched and
decoded in Rust threads while the training step runs, within a memory budget, so ``num_workers=0`` (the default)
keeps a GPU fed; with ``num_workers > 0`` each worker process opens its own reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

import deltacells
from deltacells import _core

__all__ = ["DeltaCellsDataLoader", "DeltaCellsIterableDataset", "make_loader"]

_TORCH_DTYPES = {np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32,
                 np.dtype(np.int64): torch.int64, np.dtype(np.float32): torch.float32,
                 np.dtype(np.float64): torch.float64, np.dtype(np.bool_): torch.bool,
                 np.dtype(np.uint8): torch.uint8}


def _distributed() -> tuple[int, int]:
    """``(rank, world_size)`` of an initialised ``torch.distributed``, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _split_budget(budget: int, window: int, tile_nnz: list[int], tile_bytes: list[int]) -> tuple[int, int]:
    """``(max_cached_tiles, max_prefetch_tiles)`` within ``budget`` bytes: a decoded tile is about 4 bytes per
    nonzero, a prefetched one waits compressed. In this order: the window's tiles and one decoded ahead; tiles
    fetched ahead, up to two windows or 8 tiles (on object storage they hide the requests' latency, and cost only their
    compressed size); decoded places up to a whole next window; the rest as more decoded places (a cache that
    can hold a small dataset across epochs)."""
    n = max(1, len(tile_nnz))
    decoded = max(1.0, 4.0 * sum(tile_nnz) / n)
    compressed = max(1.0, sum(tile_bytes) / n)
    places = window + 1
    left = budget - places * decoded
    ahead = max(1, min(max(2 * window, 8), int(left // compressed)))
    left -= ahead * compressed
    more = max(0, min(window - 1, int(left // decoded)))
    places += more
    left -= more * decoded
    return places + max(0, int(left // decoded)), ahead


class DeltaCellsIterableDataset(torch.utils.data.IterableDataset):
    """Batches of a deltacells dataset for training: ``{"X": tensor, "obs": {column: tensor}, "index": tensor}``.

    Args:
        uri: the dataset (a path, a store URL or a :class:`deltacells.Backend`).
        batch_size: cells per batch.
        shuffle: shuffle tiles and cells each epoch (``False``: cell order).
        shuffle_tiles: tiles per shuffling window; that many decoded tiles are held at once.
        seed: seed of the shuffles (with the epoch, :meth:`set_epoch`).
        drop_last: leave out each rank's last batch when it is short.
        remainder: ``"drop"`` (no cell goes to two ranks; up to ``world_size - 1`` cells left out) or ``"wrap"``
            (every cell served, a few twice) to give every rank the same number of batches.
        obs_columns: obs columns to return with each batch (localized at once): category columns as integer codes
            (vocabularies: :meth:`categories`), numbers and booleans as tensors, strings as lists.
        output: ``"csr"`` (a torch sparse CSR tensor, no copy of the decoded indices and values) or ``"dense"``.
        values_dtype: ``torch.float32`` (default) or ``torch.int32``.
        rank, world_size: this process's share; default from ``torch.distributed`` when it is initialised.
        memory_budget: bytes of tiles to hold: the window's decoded tiles, tiles decoded and fetched (compressed)
            ahead, and a cache of decoded tiles with what is left; at least the window and one tile decoded ahead.
        decode_threads: Rust threads decoding each tile and batch (default: every core, or 1 per DataLoader worker).
        io_threads, verify, cache_dir, storage_options: as for :class:`deltacells.DeltaCellsDataset`.
    """

    def __init__(
        self,
        uri: Any,
        batch_size: int,
        *,
        shuffle: bool = True,
        shuffle_tiles: int = 4,
        seed: int = 0,
        drop_last: bool = False,
        remainder: str = "drop",
        obs_columns: Sequence[str] = (),
        output: str = "csr",
        values_dtype: torch.dtype = torch.float32,
        rank: int | None = None,
        world_size: int | None = None,
        memory_budget: int = 2 << 30,
        decode_threads: int | None = None,
        io_threads: int = 4,
        verify: bool = False,
        cache_dir: str | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        if output not in ("csr", "dense"):
            raise ValueError(f'output must be "csr" or "dense", not {output!r}')
        if values_dtype not in (torch.float32, torch.int32):
            raise ValueError(f"values_dtype must be torch.float32 or torch.int32, not {values_dtype}")
        if remainder not in ("drop", "wrap"):
            raise ValueError(f'remainder must be "drop" or "wrap", not {remainder!r}')
        if int(batch_size) < 1 or int(shuffle_tiles) < 1:
            raise ValueError("batch_size and shuffle_tiles must be at least 1")
        self.uri = uri
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.shuffle_tiles = int(shuffle_tiles)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.remainder = remainder
        self.obs_columns = [obs_columns] if isinstance(obs_columns, str) else list(obs_columns)
        self.output = output
        self.values_dtype = values_dtype
        self._rank, self._world_size = rank, world_size
        self.memory_budget = int(memory_budget)
        self.decode_threads = decode_threads
        self.io_threads = int(io_threads)
        self.verify = bool(verify)
        self.cache_dir = cache_dir
        self.storage_options = storage_options
        self.epoch = 0
        self._first_batch = 0
        self._yielded = 0
        self._ds: deltacells.DeltaCellsDataset | None = None
        self._pid = -1
        probe = self._dataset(1)  # opened now: a bad URI fails here, not in a worker
        self.tile_cells = list(probe.manifest.tile_cells)
        self.n_genes = probe.n_genes
        if self.obs_columns:
            if probe.obs is None:
                raise ValueError("obs_columns were given but the dataset has no obs")
            probe.obs.localize(self.obs_columns)

    # ------------------------------------------------------------------ the split

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._rank if self._rank is not None else _distributed()[0]

    @property
    def world_size(self) -> int:
        """Ranks."""
        return self._world_size if self._world_size is not None else _distributed()[1]

    def _plan(self, worker: int, num_workers: int, first_batch: int, epoch: int | None = None) -> _core.EpochPlan:
        return _core.EpochPlan(
            self.tile_cells, self.batch_size, self.shuffle, self.shuffle_tiles, self.seed, self.drop_last,
            self.remainder, self.rank, self.world_size, worker, num_workers, first_batch,
            self.epoch if epoch is None else epoch,
        )

    def __len__(self) -> int:
        """Batches per epoch of this rank (every rank has as many)."""
        return int(self._plan(0, 1, 0).rank_batches())

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (which changes the order, deterministically) and starts it from its first batch."""
        self.epoch = int(epoch)
        self._first_batch = 0
        self._yielded = 0

    # ------------------------------------------------------------------ resumption

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch is: its number and the batches of this rank yielded so far (with ``num_workers=0``; a
        loader with workers counts them itself, see :class:`DeltaCellsDataLoader`)."""
        return {"epoch": self.epoch, "batches": self._first_batch + self._yielded, "seed": self.seed,
                "batch_size": self.batch_size, "shuffle_tiles": self.shuffle_tiles, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from ``state``: the next iteration yields exactly the batches the interrupted epoch had not
        yielded yet. Refused if the order would differ (another seed, batch size, window or world size)."""
        for key in ("seed", "batch_size", "shuffle_tiles", "world_size"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"the state was saved with {key}={state[key]}, this loader has {getattr(self, key)}")
        self.epoch = int(state["epoch"])
        self._first_batch = int(state["batches"])
        self._yielded = 0

    # ------------------------------------------------------------------ reading

    def _dataset(self, workers: int) -> deltacells.DeltaCellsDataset:
        if self._ds is not None and self._pid == os.getpid():
            return self._ds
        threads = self.decode_threads or max(1, (os.cpu_count() or 1) // max(1, workers))
        probe = deltacells.DeltaCellsDataset(
            self.uri, decode_threads=threads, io_threads=self.io_threads, verify=self.verify,
            cache_dir=self.cache_dir, storage_options=self.storage_options,
        )
        cached, self._ahead = _split_budget(self.memory_budget, self.shuffle_tiles, probe.manifest.tile_nnz,
                                            probe.manifest.tile_bytes)
        # Sized from the manifest the probe read, without fetching it again (a round trip on object storage).
        self._ds = probe.reopened(max_cached_tiles=cached, max_prefetch_tiles=self._ahead)
        probe.close()
        self._pid = os.getpid()
        return self._ds

    @property
    def dataset(self) -> deltacells.DeltaCellsDataset:
        """The reader of this process."""
        return self._dataset(1)

    def categories(self, column: str) -> list[str]:
        """The vocabulary of a category obs column (its codes index it)."""
        obs = self.dataset.obs
        if obs is None:
            raise ValueError("the dataset has no obs")
        return obs.categories(column)

    def stats(self) -> dict[str, float]:
        """The reader's counters (see :attr:`deltacells.DeltaCellsDataset.stats`)."""
        return self.dataset.stats

    def _tensor(self, batch: deltacells.SparseBatch) -> torch.Tensor:
        if self.output == "dense":
            return batch.to_torch_dense()
        return batch.to_torch_csr()

    def _obs(self, cells: np.ndarray) -> dict[str, Any]:
        if not self.obs_columns:
            return {}
        got = self.dataset.obs.take(cells, self.obs_columns, warn=False)
        out: dict[str, Any] = {}
        for name, values in got.items():
            if values.dtype == object:
                out[name] = list(values)
            else:
                out[name] = torch.from_numpy(values)
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        ds = self._dataset(workers)
        plan = self._plan(worker, workers, self._first_batch)
        values = np.float32 if self.values_dtype == torch.float32 else np.int32
        self._yielded = 0
        budget = self._ahead + self.shuffle_tiles
        next_epoch = None
        for j in range(plan.n_batches()):
            # The tiles of this batch's window and of the windows ahead, within the budget, in flight (tiles cached
            # or on their way are skipped, so asking again each batch costs little).
            ahead = plan.tiles_ahead(j, budget)
            ds.prefetch(ahead)
            if len(ahead) < budget and self.shuffle:
                # The epoch's last windows leave room: it goes to the first tiles of the next epoch (the order
                # set_epoch(epoch + 1) gives, as training loops call it), so that epoch starts without waiting on
                # the store. Not reading them costs only their fetches.
                if next_epoch is None:
                    next_epoch = self._plan(worker, workers, 0, self.epoch + 1)
                ds.prefetch(next_epoch.tiles_ahead(0, budget - len(ahead)))
            cells = plan.batch(j)
            batch = ds.get_batch(cells, values_dtype=values)
            yield {"X": self._tensor(batch), "obs": self._obs(cells), "index": torch.from_numpy(cells)}
            self._yielded += 1


class DeltaCellsDataLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` of ready batches from a :class:`DeltaCellsIterableDataset` (``batch_size=None``) that
    counts the batches it yields, so that :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch also with
    worker processes."""

    def __init__(self, dataset: DeltaCellsIterableDataset, **kwargs: Any) -> None:
        kwargs.setdefault("batch_size", None)
        if kwargs["batch_size"] is not None:
            raise ValueError("batches are formed by the dataset: leave batch_size at None")
        super().__init__(dataset, **kwargs)
        self._start = 0
        self._count = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        self._start = ds._first_batch
        self._count = 0
        for batch in super().__iter__():
            self._count += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Sets the dataset's epoch (see :meth:`DeltaCellsIterableDataset.set_epoch`)."""
        self.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        self._start = self._count = 0

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the batches yielded so far in it."""
        ds: DeltaCellsIterableDataset = self.dataset  # type: ignore[assignment]
        state = ds.state_dict()
        state["batches"] = self._start + self._count
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from ``state`` (see :meth:`DeltaCellsIterableDataset.load_state_dict`)."""
        self.dataset.load_state_dict(state)  # type: ignore[attr-defined]
        self._start = int(state["batches"])
        self._count = 0


def make_loader(
    uri: Any, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False, **dataset_options: Any
) -> DeltaCellsDataLoader:
    """A ready loader: ``DeltaCellsDataLoader(DeltaCellsIterableDataset(uri, batch_size, **dataset_options),
    num_workers=num_workers, pin_memory=pin_memory)``. ``num_workers=0`` is the fast default (Rust threads
    fetch and decode ahead)."""
    ds = DeltaCellsIterableDataset(uri, batch_size, **dataset_options)
    kw: dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers > 0:
        kw["persistent_workers"] = False
    return DeltaCellsDataLoader(ds, **kw)
