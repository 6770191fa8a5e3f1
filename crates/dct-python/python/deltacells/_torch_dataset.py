"""The dataset of :mod:`deltacells.torch`: one pass of a rank's (or a DataLoader worker's) share of an epoch as
batches, the epoch and resume point it serves, and the reader it opens in each process."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.utils.data

import deltacells
from deltacells import _batch_slots, _core
from deltacells._args import int_argument
from deltacells._seeds import as_seed
from deltacells._tiles import as_values_dtype
from deltacells._torch_process import (
    distributed_ranks,
    gathering_pool,
    gathering_thread,
    spawning,
    stop_gathering,
    worker_count,
)
from deltacells.dataset import _absolute_if_local, _changed

if TYPE_CHECKING:  # pragma: no cover
    from deltacells._obs_store import ObsStore

__all__ = ["DeltaCellsIterableDataset"]


# What a pass over the dataset serves: (epoch, batches of the rank already yielded, rank, world size, whether the
# process goes on to the next epoch, so that fetching its first tiles ahead is worth it, whether batches go to the
# training process through reused shared memory (see _batch_slots)).
_Ticket = tuple[int, int, int, int, int, int]
# The settings a resumed epoch must share with the interrupted one for its order to be the same.
_ORDER_KEYS = ("seed", "batch_size", "shuffle_tiles", "shuffle", "drop_last", "remainder", "world_size", "tiles",
               "manifest", "selection", "weights", "epoch_cells", "stratify_by", "class_weights")


#: The bytes a rank's loader holds unless told otherwise (``memory_budget``).
DEFAULT_MEMORY_BUDGET = 2 << 30


def _another_split(saved: int, parts: int, note: str) -> ValueError:
    """The refusal of a resume point counting batches of an epoch split among `saved` workers by `parts`."""
    return ValueError(
        f"cannot resume: the state was saved by a loader with {saved} worker part(s) of the epoch, this one has "
        f"num_workers={parts}; each worker serves its own windows, so the rest of the epoch is only defined for the "
        f"same num_workers (use num_workers={saved}; {note})"
    )


class DeltaCellsIterableDataset(torch.utils.data.IterableDataset):
    """Batches of a deltacells dataset for training: ``{"X": tensor, "obs": {column: tensor}, "index": tensor}``.

    Args:
        uri: the dataset (a path, a store URL or a :class:`deltacells.Backend`), or a :class:`deltacells.Corpus`
            (many datasets read through one gene vocabulary, or a selection of their cells): its cells are served
            with the same guarantees, ``"index"`` holds corpus cell indices, and batches gain ``"dataset"``, the
            member index of each cell (int64); obs columns are the corpus's (:attr:`deltacells.Corpus.obs`: one
            vocabulary per category column, missing where a member lacks the column).
        weights: for a corpus, each member's share of an epoch: a mapping ``member name -> weight`` or a sequence
            in member order. An epoch then draws ``epoch_cells`` cells (default: the corpus's cells), each member's
            share in proportion to its weight (exactly, up to rounding); a member drawn beyond its size starts
            another pass over its cells, the part of a pass taken from its tiles whole in a seeded order and a
            sample of one more, so that only tiles with drawn cells are fetched. Deterministic in (seed, epoch).
        epoch_cells: cells a weighted or stratified epoch draws (default: the corpus's cells; stratified: its cells
            with a value of ``stratify_by``).
        stratify_by: for a corpus, a category obs column: an epoch draws ``epoch_cells`` cells with each category
            equally often (or in the proportions of ``class_weights``), exactly over the epoch (up to the cells a
            split across ranks leaves out); a category drawn beyond its size starts another pass over its cells.
            Cells without a value are not drawn. The cells of one tile drawn for several categories in one pass
            share one window, so each such tile is fetched once per pass; a batch holds the categories of the
            windows its cells come from, so the balance within a batch grows with ``shuffle_tiles``. Not with
            ``weights``. The strata hold 4 bytes per selected cell in each process that plans an epoch.
        class_weights: with ``stratify_by``, each category's share: a mapping ``category -> weight`` (categories
            left out are not drawn).
        batch_size: cells per batch.
        shuffle: shuffle tiles and cells each epoch (``False``: cell order).
        shuffle_tiles: tiles per shuffling window; that many decoded tiles are held at once.
        seed: seed of the shuffles (with the epoch, :meth:`set_epoch`): an integer in -2**63..2**64, a negative one
            taken modulo 2**64 as ``torch.Generator.manual_seed`` does.
        drop_last: every batch of ``batch_size`` cells: cells that would make a short batch are left out. With
            ``W`` DataLoader workers each serves whole windows, so each worker's share ends in a short batch: a rank
            of ``S`` cells serves ``S // batch_size - (W - 1)`` batches, up to ``W`` batches' cells fewer than
            without workers. A loader whose epoch would have no batch is refused.
        remainder: ``"drop"`` (no cell goes to two ranks; up to ``world_size - 1`` cells left out) or ``"wrap"``
            (every cell served, a few twice) to give every rank the same number of batches.
        obs_columns: obs columns to return with each batch (localized at once): category columns as integer codes
            (vocabularies: :meth:`categories`), numbers and booleans as tensors, strings as lists.
        output: ``"csr"`` (a torch sparse CSR tensor, no copy of the decoded indices and values) or ``"dense"``.
        values_dtype: ``torch.float32`` (default) or ``torch.int32``; numpy's float32 or int32 (a dtype, its type or
            its name, as ``get_batch`` takes them) mean the same.
        rank, world_size: this process's share. By default from ``torch.distributed`` (or ``torchrun``'s ``RANK``
            and ``WORLD_SIZE``), looked up here in the training process, and again when a loader starts its workers
            if the process group did not exist yet: DataLoader workers (which under ``spawn`` or ``forkserver``
            have no process group) are given them.
        memory_budget: bytes the rank's loader holds: the batches it makes (up to four sparse batches of the
            dataset's mean nonzeros a cell, with a quarter spare, or three dense ones), then the window's decoded
            tiles, tiles decoded and fetched (compressed) ahead, and a cache of decoded tiles with what is left;
            split evenly among DataLoader workers. At least the window and one tile decoded ahead per worker,
            whatever the budget. The cache keeps the tiles the next epoch reads first, so each later epoch decodes
            only the tiles it could not keep (the dataset's decoded tiles take about 4 bytes a nonzero); it grows
            into memory new to the process during the first epoch, which some machines supply slowly: for data much
            larger than the budget, a smaller budget makes the first epoch faster at little cost to later ones. The
            budget counts what the loader holds; with glibc, buffers it has freed (batches, fetched tiles) can stay
            resident in the allocator's per-thread arenas, about 200-300 MB whatever the budget (measured: a 256 MiB
            budget held 520 MiB of the process, 335 MiB with ``MALLOC_MMAP_THRESHOLD_=4194304`` in the
            environment, which hands such buffers back when freed; within 4% of 1 and 2 GiB budgets either way).
            Over a Python backend the requests' buffers are Python's, and the variable matters more.
        decode_threads: Rust threads decoding each tile and batch (default: every core, shared among DataLoader
            workers).
        io_threads, cache_dir, storage_options: as for :class:`deltacells.DeltaCellsDataset`.
        verify: check each tile's CRC-32 (default on; ``False`` skips it).

    Each worker of a DataLoader serves whole windows of the rank's share, so a tile is fetched and decoded once per
    rank and epoch whatever ``num_workers`` is, and, shuffled with tiles enough for each worker of each rank to
    fill two windows, draws them from about the same tiles every epoch, so that its cache serves the next epoch;
    the batches a rank yields (and their number) depend on ``num_workers``, which a resumed run, and every rank,
    must keep.
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
        obs_columns: Sequence[str] | None = (),
        output: str = "csr",
        values_dtype: Any = torch.float32,
        rank: int | None = None,
        world_size: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        decode_threads: int | None = None,
        io_threads: int = 4,
        verify: bool | None = None,
        cache_dir: str | None = None,
        storage_options: dict[str, str] | None = None,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        epoch_cells: int | None = None,
        stratify_by: str | None = None,
        class_weights: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        if output not in ("csr", "dense"):
            raise ValueError(f'output must be "csr" or "dense", not {output!r}')
        values_dtype = _torch_values_dtype(values_dtype)
        if remainder not in ("drop", "wrap"):
            raise ValueError(f'remainder must be "drop" or "wrap", not {remainder!r}')
        batch_size = int_argument("batch_size", batch_size, 1)
        shuffle_tiles = int_argument("shuffle_tiles", shuffle_tiles, 1)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither (they then come from torch.distributed)")
        if world_size is not None:
            world_size = int_argument("world_size", world_size, 1)
            rank = int_argument("rank", rank, 0)
            if rank >= world_size:
                raise ValueError(f"rank {rank} is outside 0..{world_size} (world_size)")
        self.uri = uri
        # Where workers open it: a relative path made absolute now (a worker started after the working directory
        # changed would open another folder).
        self._location = _absolute_if_local(os.fspath(uri) if isinstance(uri, os.PathLike) else uri)
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.shuffle_tiles = shuffle_tiles
        self.seed = as_seed(seed)
        self.drop_last = bool(drop_last)
        self.remainder = remainder
        # None (as open_dataset and open_corpus take it) is no columns.
        self.obs_columns = [obs_columns] if isinstance(obs_columns, str) else list(obs_columns or ())
        self.output = output
        self.values_dtype = values_dtype
        self._ranks: tuple[int, int] | None = None if rank is None else (int(rank), int(world_size))  # type: ignore[arg-type]
        self._resolve_ranks()
        self.memory_budget = int_argument("memory_budget", memory_budget, 0)
        self.decode_threads = None if decode_threads is None else int_argument("decode_threads", decode_threads, 1)
        self.io_threads = int_argument("io_threads", io_threads, 1)
        self.verify = True if verify is None else bool(verify)
        self.cache_dir = cache_dir
        self.storage_options = storage_options
        # The epoch and where its next pass starts; `_fresh`: set by set_epoch / load_state_dict since the last pass
        # (else the next pass is the next epoch).
        self.epoch = 0
        self._resume = 0
        # The worker parts of the epoch the resume point counts batches of (0: a finished epoch, any parts).
        self._resume_parts = 1
        self._fresh = True
        # The epoch a loaded state was saved at the very end of (it resumes as the next one), until a pass begins.
        self._finished: int | None = None
        # The pass under way in this process: [epoch, first batch, parts], and the batches it yielded.
        self._current: list[int] | None = None
        self._yielded = 0
        # Passes under way in this process (iterations not yet finished or closed): set_epoch during one sets the
        # next pass's epoch and leaves the state of the one under way.
        self._running = 0
        # Set by a DeltaCellsDataLoader: its workers (1 without; None until one takes the dataset, whose number of
        # workers, a plain DataLoader's, is then known only when a pass begins), the ticket of its pass, and shared
        # memory through which persistent workers learn each pass's ticket.
        self._parts: int | None = None
        self._handoff: _Ticket | None = None
        self._shared: Any = None
        self._ds: Any = None
        self._pid = -1
        self.weights: list[float] | None = None
        self.epoch_cells: int | None = None
        self.stratify_by = None if stratify_by is None else str(stratify_by)
        self.class_weights: list[float] | None = None
        self._strata: Any = None
        if (weights is not None or epoch_cells is not None) and not isinstance(uri, deltacells.Corpus):
            raise ValueError("weights and epoch_cells weigh the members of a Corpus; this is one dataset")
        if epoch_cells is not None:
            given = epoch_cells
            epoch_cells = -1 if isinstance(given, bool) else int_argument("epoch_cells", given, -(2**63))
            if epoch_cells < 1:
                raise ValueError(f"epoch_cells must be a positive number of cells, not {given!r}")
        if stratify_by is not None and not isinstance(uri, deltacells.Corpus):
            raise ValueError("stratify_by draws the cells of a Corpus; open the dataset as one with "
                             "deltacells.open_corpus([uri])")
        if class_weights is not None and stratify_by is None:
            raise ValueError("class_weights weigh the categories of stratify_by: give stratify_by too")
        if stratify_by is not None and weights is not None:
            raise ValueError("weights and stratify_by cannot be combined: weigh members, or balance categories")
        if isinstance(uri, deltacells.Corpus) and uri.n_cells == 0:
            # An epoch of no batches would end every training loop at once, silently.
            raise ValueError(f"the corpus has no cells to train on (n_cells is 0 over its {len(uri.members)} "
                             "members): the select, where or split that made it chose none; check its conditions")
        if isinstance(uri, deltacells.Corpus) and weights is not None:
            if isinstance(weights, Mapping):
                unknown = [k for k in weights if k not in uri.members]
                if unknown:
                    raise ValueError(f"weights name members the corpus does not have: {unknown}; it has {uri.members}")
                self.weights = [float(weights.get(m, 0.0)) for m in uri.members]
            else:
                self.weights = [float(w) for w in weights]
            self.epoch_cells = int(epoch_cells) if epoch_cells is not None else uri.n_cells
            uri._core.weighted_units(self.weights, self.epoch_cells, self.seed, 0)  # refused here, not in a worker
        elif isinstance(uri, deltacells.Corpus) and stratify_by is not None:
            strata = self._strata_of()  # a column that is not a category column is refused here
            cats = strata.categories
            if class_weights is not None:
                unknown = [k for k in class_weights if k not in cats]
                if unknown:
                    raise ValueError(f"class_weights name categories obs column {stratify_by!r} does not have: "
                                     f"{unknown}; it has {cats}")
                self.class_weights = [float(class_weights.get(c, 0.0)) for c in cats]
            self.epoch_cells = int(epoch_cells) if epoch_cells is not None else sum(strata.category_cells())
            # Refused here, not in a worker.
            uri._core.stratified_units(strata, self.class_weights, self.epoch_cells, self.seed, 0)
        elif epoch_cells is not None:
            raise ValueError("epoch_cells sets the size of a weighted or stratified epoch: give weights or "
                             "stratify_by too")
        if isinstance(uri, deltacells.Corpus):
            if self.obs_columns:
                for c in self.obs_columns:
                    uri.obs.kind(c)  # KeyError for a column no member has
                uri.obs.localize(self.obs_columns)
            self.tile_cells = uri.tile_cells
            self.n_genes = uri.n_genes
            manifests = "".join(d._core.manifest_json() for d in uri.datasets) + "\n".join(uri.genes)
            # Which cells: two selections with as many cells in each tile would plan alike.
            chosen = uri._selection if uri._selection is not None else b"every cell"
            self._identity = {
                "tiles": hashlib.sha256(np.asarray(self.tile_cells, np.int64).tobytes()).hexdigest()[:16],
                "manifest": hashlib.sha256(manifests.encode()).hexdigest()[:16],
                "selection": hashlib.sha256(chosen).hexdigest()[:16],
            }
            self._check_batches(1)
            return
        probe = self._dataset(1)  # opened now: a bad URI fails here, not in a worker
        self.tile_cells = list(probe.manifest.tile_cells)
        self.n_genes = probe.n_genes
        self._identity = {
            "tiles": hashlib.sha256(np.asarray(self.tile_cells, np.int64).tobytes()).hexdigest()[:16],
            "manifest": probe._manifest_digest[:16],  # the digest the dataset keeps of the manifest it read
        }
        if self.obs_columns:
            if probe.obs is None:
                raise ValueError("obs_columns were given but the dataset has no obs")
            probe.obs.localize(self.obs_columns)
        self._check_batches(1)

    def _check_batches(self, parts: int) -> None:
        """``ValueError`` if an epoch of this rank split among ``parts`` workers has no batch: every training loop
        over it would end at once, silently."""
        if self._rank_batches(self.epoch, parts) > 0:
            return
        rank, world = self._resolve_ranks()
        cells = self.epoch_cells if self.epoch_cells is not None else sum(self.tile_cells)
        raise ValueError(
            f"an epoch of this loader has no batches on rank {rank} of {world}: {cells} cells in batches of "
            f"{self.batch_size}{' with drop_last' if self.drop_last else ''}"
            f"{f', split among {parts} workers' if parts > 1 else ''}; use a smaller batch_size"
            f"{', drop_last=False' if self.drop_last else ''}{', fewer workers' if parts > 1 else ''} or more cells"
        )

    # ------------------------------------------------------------------ the split

    def _resolve_ranks(self) -> tuple[int, int]:
        """The ranks, looked up (and kept) if they were not given and are known now."""
        if self._ranks is None:
            found = distributed_ranks()
            if found is not None:
                self._ranks = found
        return self._ranks if self._ranks is not None else (0, 1)

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._resolve_ranks()[0]

    @property
    def world_size(self) -> int:
        """Ranks."""
        return self._resolve_ranks()[1]

    def _plan(self, worker: int, parts: int, first_batch: int, epoch: int, ranks: tuple[int, int] | None = None
              ) -> _core.EpochPlan:
        rank, world = ranks if ranks is not None else self._resolve_ranks()
        units = None
        if self.weights is not None:
            units = self.uri._core.weighted_units(self.weights, self.epoch_cells, self.seed, epoch)
        elif self.stratify_by is not None:
            units = self.uri._core.stratified_units(self._strata_of(), self.class_weights, self.epoch_cells,
                                                    self.seed, epoch)
        return _core.EpochPlan(
            self.tile_cells, self.batch_size, self.shuffle, self.shuffle_tiles, self.seed, self.drop_last,
            self.remainder, rank, world, worker, parts, first_batch, epoch, units,
        )

    def _strata_of(self) -> _core.Strata:
        """The corpus's cells by category of ``stratify_by``, made once per process (not pickled)."""
        if self._strata is None or self._strata[0] != os.getpid():
            self._strata = (os.getpid(), self.uri.obs._core.strata(self.stratify_by))
        return cast("_core.Strata", self._strata[1])

    def _rank_batches(self, epoch: int, parts: int) -> int:
        # Planning a weighted or stratified epoch takes a while, and trainers ask len() several times an epoch: the
        # counts of the plans asked last are kept, keyed by everything _plan reads (its settings are attributes a
        # caller may change).
        counts = self.__dict__.setdefault("_rank_batches_of", {})
        key = (epoch, parts, self._resolve_ranks(), self.batch_size, self.shuffle, self.shuffle_tiles, self.seed,
               self.drop_last, self.remainder, None if self.weights is None else tuple(self.weights),
               self.epoch_cells, self.stratify_by,
               None if self.class_weights is None else tuple(self.class_weights))
        if key not in counts:
            if len(counts) >= 4:
                counts.clear()
            counts[key] = int(self._plan(0, parts, 0, epoch).rank_batches())
        return int(counts[key])

    def __len__(self) -> int:
        """Batches per epoch of this rank (every rank has as many), for the workers of the loader it belongs to."""
        return self._rank_batches(self.epoch, self._parts or 1)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (which changes the order, deterministically). The next pass starts it from its first
        batch, unless a state of this same epoch was just loaded (:meth:`load_state_dict`): then it goes on from
        there, so a training loop may call ``set_epoch`` at the start of every epoch, resumed or not (a state saved
        at the end of epoch ``e`` then leaves nothing of ``set_epoch(e)`` to serve)."""
        epoch = int_argument("epoch", epoch, 0)
        finished = self._finished if self._fresh else None
        self._finished = None
        if finished is not None and epoch == finished:
            # The state loaded was saved after this epoch's last batch: its pass has nothing left to serve.
            self._resume = self._rank_batches(epoch, self._parts or 1)
            self._resume_parts = 0  # however many workers serve it
        elif not (self._resume and self._fresh and epoch == self.epoch):
            self._resume = 0
        self.epoch = epoch
        self._fresh = True
        if not self._running:
            self._current = None
            self._yielded = 0

    # ------------------------------------------------------------------ resumption

    def _state(self, epoch: int, done: int, parts: int) -> dict[str, Any]:
        finished = None
        if done and done >= self._rank_batches(epoch, parts):
            # A finished epoch resumes as the next one, whole; which one it was stays known, for a loop that calls
            # set_epoch with it again (its own count of epochs saved at the same step).
            finished, epoch, done = epoch, epoch + 1, 0
        rank, world = self._resolve_ranks()
        return {"epoch": epoch, "batches": done, "after_epoch": finished, "seed": self.seed,
                "batch_size": self.batch_size,
                "shuffle_tiles": self.shuffle_tiles, "shuffle": self.shuffle, "drop_last": self.drop_last,
                "remainder": self.remainder, "world_size": world, "num_workers": parts, "weights": self.weights,
                "epoch_cells": self.epoch_cells, "stratify_by": self.stratify_by, "class_weights": self.class_weights,
                **self._identity}

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch is: its number and the batches of this rank yielded so far (counted before each batch
        is handed over), with the settings that fix the order. For the dataset iterated directly, by a ``DataLoader``
        without workers, or by a :class:`DeltaCellsDataLoader` (which counts its workers' batches here too; a plain
        ``DataLoader``'s workers count in their own copies). During a pass, that pass's, even after ``set_epoch``
        chose the next one."""
        if self._current is not None and (self._running or not self._fresh):
            epoch, first, parts = self._current
            return self._state(epoch, first + self._yielded, parts)
        return self._state(self.epoch, self._resume, self._parts or 1)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from ``state``: the next pass yields exactly the batches the interrupted epoch had not yielded
        yet. ``ValueError`` if the order would differ (the setting is named); a state of an epoch split among
        another number of DataLoader workers is refused when that number is known: here for a dataset a
        :class:`DeltaCellsDataLoader` took, else when the pass begins (in the workers of a plain ``DataLoader``)."""
        self._load(state, self._parts)

    def _load(self, state: dict[str, Any], parts: int | None) -> None:
        mine = self._state(0, 0, parts or 1)
        missing = [k for k in ("epoch", "batches", *_ORDER_KEYS) if k in mine and k not in state]
        if missing:
            # Without them the order it was saved in is unknown: resuming could serve other batches silently.
            raise ValueError(f"cannot resume: the state lacks {', '.join(missing)}; give a state_dict() of a "
                             "deltacells loader whole")
        for key in _ORDER_KEYS:
            if key in state and state[key] != mine.get(key):
                what = "dataset" if key in ("tiles", "manifest") else "cells" if key == "selection" else key
                detail = ("another dataset (its tile layout differs)" if key == "tiles" else
                          "another dataset (its manifest differs)" if key == "manifest" else
                          "another selection of the corpus's cells" if key == "selection" else
                          f"{key}={state[key]!r}, this loader has {key}={mine[key]!r}")
                raise ValueError(f"cannot resume: the state was saved with {detail}; the batches would differ "
                                 f"(resume with the same {what})")
        done = int_argument("the state's batches", state["batches"], 0)
        epoch = int_argument("the state's epoch", state["epoch"], 0)
        saved_parts = int_argument("the state's num_workers", state.get("num_workers", 1), 0) or 1
        if done and parts is not None and saved_parts != parts:
            raise _another_split(saved_parts, parts, "0 and 1 are the same")
        if done > self._rank_batches(epoch, saved_parts):
            raise ValueError(f"cannot resume: the state counts {done} batches of epoch {epoch}, which has "
                             f"{self._rank_batches(epoch, saved_parts)} on this rank; it is not a state of this loader")
        self.epoch = epoch
        self._resume = done
        self._resume_parts = saved_parts
        after = state.get("after_epoch")
        self._finished = int(after) if after is not None and not done and int(after) == self.epoch - 1 else None
        self._fresh = True
        self._current = None
        self._yielded = 0

    # ------------------------------------------------------------------ passes

    def _begin(self, parts: int, lasting: bool = True, slots: bool = False) -> _Ticket:
        """Starts a pass in the training process: the next epoch unless one was set, from the resume point.
        ``lasting``: the processes reading it read the next epoch too (not so for workers that end with the pass);
        ``slots``: workers send batches through reused shared memory (a DeltaCellsDataLoader opens them)."""
        if not self._fresh:
            self.epoch += 1
            self._resume = 0
        first = self._resume
        if first and not self._resume_parts:
            first = self._rank_batches(self.epoch, parts)  # a finished epoch: nothing left, whatever the split
        elif first and self._resume_parts != parts:
            raise _another_split(self._resume_parts, parts, "0 and 1 are the same")
        ticket = (self.epoch, first, *self._resolve_ranks(), int(lasting), int(slots))
        self._resume = 0
        self._finished = None
        self._fresh = False
        self._current = [ticket[0], ticket[1], parts]
        self._yielded = 0
        return ticket

    def _worker_ticket(self) -> _Ticket:
        """The pass a DataLoader worker serves: from the loader's shared memory (persistent workers), else as the
        loader set it before starting the workers, else (a plain DataLoader) the dataset's epoch and resume point."""
        shared = self._shared
        if shared is not None and shared[0] > 0:
            return tuple(int(v) for v in shared[1:7])  # type: ignore[return-value]
        if self._handoff is not None:
            return self._handoff
        if self.__dict__.get("_plain_passes", 0):
            # This copy served a pass already: its worker outlives passes (persistent_workers=True) and a plain
            # DataLoader has no way to hand it the epoch set since, so every epoch would repeat the first's order.
            raise RuntimeError(
                "a plain torch DataLoader with persistent_workers=True keeps its workers' copies of the dataset, so "
                "set_epoch and load_state_dict never reach them and every epoch would repeat the first one's order; "
                "use deltacells.torch.make_loader (or DeltaCellsDataLoader), which hands each pass to its persistent "
                "workers, or persistent_workers=False"
            )
        self._plain_passes = 1
        first = self._resume
        parts = self._resume_parts
        if first and parts != worker_count():
            if parts:
                # The resume point counts batches of an epoch split in `parts`; this DataLoader splits it otherwise,
                # so no batch count of its own is the rest of that epoch.
                raise _another_split(parts, worker_count(), "or deltacells.torch.make_loader, which checks this "
                                     "when the state is loaded")
            first = self._rank_batches(self.epoch, worker_count())  # a finished epoch: nothing left to serve
        return (self.epoch, first, *self._resolve_ranks(), 0, 0)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for a spawned DataLoader worker (or by the user): the ranks are resolved here, in the training
        # process, where the process group is; the shared ticket goes along only to a process being spawned.
        self._resolve_ranks()
        state = dict(self.__dict__)
        state["_running"] = 0  # passes of this process
        if not spawning():
            state["_shared"] = None
        if isinstance(self.uri, deltacells.Corpus):
            state["_ds"] = None  # a corpus's readers are rebuilt in each process
            state["_strata"] = None  # so are its strata
        return state

    # ------------------------------------------------------------------ reading

    def _dataset(self, workers: int) -> Any:
        if self._ds is not None and self._pid == os.getpid():
            return self._ds
        threads = self.decode_threads or max(1, (os.cpu_count() or 1) // max(1, workers))
        if isinstance(self.uri, deltacells.Corpus):
            held = self._held_batches(self.uri.n_genes)
            # One set of threads for every member; the cache and prefetch sized from all members' tiles.
            self._ds = self.uri._reader(self.memory_budget // max(1, workers), self.shuffle_tiles,
                                        io_threads=self.io_threads, decode_threads=threads, verify=self.verify,
                                        held=held)
            self._ahead = self._ds.ahead
            self._pid = os.getpid()
            return self._ds
        probe = deltacells.DeltaCellsDataset(
            self.__dict__.get("_location", self.uri), decode_threads=threads, io_threads=self.io_threads,
            verify=self.verify, cache_dir=self.cache_dir, storage_options=self.storage_options,
        )
        known = self.__dict__.get("_identity")
        if known is not None and probe._manifest_digest[:16] != known["manifest"]:
            # Opened again in a DataLoader worker (or after a fork): the dataset the loader was made on, or none.
            probe.close()
            raise _changed(self.uri if isinstance(self.uri, str) else repr(self.uri))
        # The reader's memory model (dct_dataset::TileBudget): the batches held, the window and one tile decoded
        # ahead, tiles fetched ahead, a next window decoded, the rest a cache; each worker takes an equal share.
        cached, self._ahead = probe._core.budget_split(self.memory_budget // max(1, workers), self.shuffle_tiles,
                                                       *self._held_batches(probe.n_genes))
        # Sized from the manifest the probe read, without fetching it again (a round trip on object storage).
        self._ds = probe.reopened(max_cached_tiles=cached, max_prefetch_tiles=self._ahead)
        probe.close()
        self._pid = os.getpid()
        return self._ds

    def _held_batches(self, n_genes: int) -> tuple[int, int, int]:
        """The batches a process of this loader holds beside its tiles, which the budget covers too: (cells a batch,
        batches, genes of a dense batch or 0). Sparse batches live in the process's slots (``_batch_slots``: at most
        ``MAX_LOCAL_SLOTS`` in the training process, and as many in flight from a worker with the DataLoader's
        default prefetch); a dense batch is held by the caller, gathered ahead and, until the loop takes the next
        one, still bound to the loop's variable."""
        if self.output == "dense":
            return self.batch_size, 3, n_genes
        return self.batch_size, _batch_slots.MAX_LOCAL_SLOTS, 0

    @property
    def dataset(self) -> Any:
        """The reader of this process (a :class:`deltacells.DeltaCellsDataset`, or a corpus's readers)."""
        return self._dataset(1)

    def categories(self, column: str) -> list[str]:
        """The vocabulary of a category obs column (its codes index it)."""
        if isinstance(self.uri, deltacells.Corpus):
            return self.uri.obs.categories(column)
        obs = getattr(self.dataset, "obs", None)
        if obs is None:
            raise ValueError("the dataset has no obs")
        return obs.categories(column)

    @property
    def stats(self) -> _Stats:
        """The reader's counters (see :attr:`deltacells.DeltaCellsDataset.stats`): an attribute as the dataset's,
        and callable (``stats()``) as this loader's was."""
        return _Stats(self.dataset.stats)

    def _tensor(self, batch: deltacells.SparseBatch) -> torch.Tensor:
        if self.output == "dense":
            return batch.to_torch_dense()
        return batch.to_torch_csr()

    def _obs(self, cells: np.ndarray) -> dict[str, Any]:
        if not self.obs_columns:
            return {}
        got: dict[str, Any]
        if isinstance(self.uri, deltacells.Corpus):
            got = self.uri.obs.take(cells, self.obs_columns, warn=False)
        else:
            # Not None: __init__ refuses obs_columns for a dataset without obs.
            obs = cast("ObsStore", self.dataset.obs)
            got = obs.take(cells, self.obs_columns, warn=False)
        out: dict[str, Any] = {}
        for name, values in got.items():
            if isinstance(values, list) or values.dtype == object:
                out[name] = list(values)
            else:
                out[name] = torch.from_numpy(values)
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            worker, workers = 0, 1
            ticket = self._handoff if self._handoff is not None else self._begin(1)
            self._handoff = None
        else:
            worker, workers = info.id, info.num_workers
            ticket = self._worker_ticket()
        epoch, first, rank, world, lasting, slots = ticket
        ds = self._dataset(workers)
        plan = self._plan(worker, workers, first, epoch, (rank, world))
        if plan.rank_batches() == 0:
            self._check_batches(workers)  # refused (a plain DataLoader's workers are known only here)
        values = np.float32 if self.values_dtype == torch.float32 else np.int32
        budget = self._ahead + self.shuffle_tiles
        next_epoch = None
        corpus = isinstance(self.uri, deltacells.Corpus)
        window_start = -1
        if lasting:
            # The reader outlives this pass: its cache keeps, of the tiles this pass is done with, those the next
            # pass reads first.
            next_epoch = self._plan(worker, workers, 0, epoch + 1, (rank, world))
            ds.plan_passes(plan.tile_order(), next_epoch.tile_order())

        def make(j: int) -> Any:
            """Batch ``j``: its tiles and the windows ahead asked for, its rows gathered."""
            nonlocal next_epoch, window_start
            # The tiles of this batch's window and of the windows ahead, within the budget, in flight (tiles cached
            # or on their way are skipped, so asking again each batch costs little).
            ahead = plan.tiles_ahead(j, budget)
            following: list[int] = []
            if len(ahead) < budget and self.shuffle and lasting:
                # The epoch's last windows leave room: it goes to the first tiles of the next epoch (the order the
                # next pass takes), so that epoch starts without waiting on the store. Not reading them costs only
                # their fetches.
                if next_epoch is None:
                    next_epoch = self._plan(worker, workers, 0, epoch + 1, (rank, world))
                following = list(next_epoch.tiles_ahead(0, budget - len(ahead)))
            if corpus and ahead and ahead[0] != window_start:
                # A new window: the members' readers give back the tiles no window ahead needs (but those kept for
                # the reads to come, within the cache size), so their caches together stay within the budget
                # however many members the windows visit.
                window_start = ahead[0]
                ds.release_tiles_for(list(ahead) + following, self.shuffle_tiles)
            ds.prefetch(ahead)
            if following:
                ds.prefetch(following)
            cells = plan.batch(j)
            out: Any = None
            if self.output == "csr" and info is None:
                out = _batch_slots.pool(shared=False).take(ds, cells, values, self.n_genes, self._obs(cells))
            elif self.output == "csr" and slots:
                out = _batch_slots.pool().fill(ds, cells, values, self.n_genes, self._obs(cells))
            if out is None and corpus:
                batch, member = ds.get_batch_with_members(cells, values)
                out = {"X": self._tensor(batch), "obs": self._obs(cells), "index": torch.from_numpy(cells),
                       "dataset": torch.from_numpy(member)}
            elif out is None:
                batch = ds.get_batch(cells, values_dtype=values)
                out = {"X": self._tensor(batch), "obs": self._obs(cells), "index": torch.from_numpy(cells)}
            return out

        n = plan.n_batches()
        if info is not None or n == 0:
            # A DataLoader worker: the DataLoader's own prefetch already gathers batches ahead of the caller.
            for j in range(n):
                out = make(j)
                # Counted before it is handed over: a state taken while the caller holds this batch includes it.
                self._yielded += 1
                yield out
            return
        # In the training process the next batch is gathered on the process's gathering thread while the caller works
        # on this one (the gather releases the GIL), so a loop that blocks in its step does not wait for it after the
        # step. Batches in order, one at a time: the plan, prefetches and slots see the calls they saw without it.
        gatherer = gathering_pool()
        pending: concurrent.futures.Future[Any] | None = gatherer.submit(make, 0)
        self._running += 1
        try:
            for j in range(n):
                assert pending is not None
                out = pending.result()
                pending = gatherer.submit(make, j + 1) if j + 1 < n else None
                self._yielded += 1
                yield out
        except BaseException as left:
            # Left on an error or Ctrl-C (not a caller's early stop): the gather under way gives up its storage
            # waits, so that leaving does not wait for a read from storage that has stopped answering.
            if (not isinstance(left, GeneratorExit) and pending is not None and not pending.cancel()
                    and threading.current_thread() is not gathering_thread()):
                with stop_gathering():
                    concurrent.futures.wait([pending])
            raise
        finally:
            self._running -= 1
            # A caller that stops early: the batch gathered for it is dropped (not started, or finished first), so
            # no gather of this iteration runs once it has ended. (Not when the garbage collector ends the iteration
            # on the gathering thread itself, which would wait for its own work.)
            if pending is not None and not pending.cancel() and threading.current_thread() is not gathering_thread():
                concurrent.futures.wait([pending])


class _Stats(dict[str, float]):
    """A dict of counters that is also called for itself: ``loader.dataset.stats`` reads as a dataset's ``stats``
    attribute does, and ``stats()``, how this dataset first gave them, still works."""

    def __call__(self) -> dict[str, float]:
        return dict(self)


def _torch_values_dtype(dtype: Any) -> torch.dtype:
    """``torch.float32`` or ``torch.int32`` for that torch dtype, or for numpy's float32 or int32 (dtype, type or
    name); ``ValueError`` for anything else."""
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.int32):
            raise ValueError(f"values_dtype must be float32 or int32, not {dtype}")
        return dtype
    return torch.float32 if as_values_dtype(dtype) == np.float32 else torch.int32
