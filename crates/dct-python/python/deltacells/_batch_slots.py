"""Batches decoded into memory that is used again and again: in the training process, and from DataLoader workers.

Memory obtained fresh for every batch is faulted in page by page and handed back to the system when the batch is
freed: for batches of a few megabytes that costs as much system time as the decoding. The loader therefore decodes
each batch into a *slot* it keeps and fills again once the batch is dead. In the training process (no workers) a
slot is anonymous memory, and the batch's tensors are views of it.

From DataLoader workers, a tensor that a DataLoader worker returns is copied by PyTorch into a new shared-memory
segment, which the training process then maps: on a 1,024-cell batch of PBMC cells (7 MB) that costs more than
decoding the batch, because every page of a new segment is faulted in twice and torn down again. Here a worker
decodes each batch straight into a *slot*, an anonymous memory file (``memfd``) that it keeps and fills again once
the training process is done with it, and sends only a small :class:`SharedBatch` naming the slot. The training
process (``DeltaCellsDataLoader``) maps a slot the first time it sees it (its file descriptor comes along then) and
builds the batch's tensors as views of the mapping. Those tensors hold one numpy array of the slot's bytes; when the
last of them (or of any view taken from them) is freed, a finalizer marks the slot free in its header, and the
worker may fill it again. No batch is ever overwritten while anything can still read it.

Where ``os.memfd_create`` does not exist (macOS), and under a ``collate_fn`` of the caller's own (which expects the
batches themselves), workers return ordinary tensors.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from multiprocessing.reduction import DupFd
from typing import Any

import numpy as np
import torch

from deltacells import _core

# A slot's header: its state (0 free, 1 holding a batch the training process may still read), then padding.
_HEADER = 64
# Slots a worker makes at most; past them (the training process holds on to that many batches, or dropped them
# unopened without freeing them) a batch goes as an ordinary tensor.
MAX_SLOTS = 64
# The training process's own slots: a training step holds a batch or two (and a pin-memory thread one more), so
# a few slots serve every batch. They live as long as the process, so a caller that holds many batches at once
# gets the rest as ordinary tensors rather than the process keeping that many batches' memory for good.
MAX_LOCAL_SLOTS = 4

AVAILABLE = hasattr(os, "memfd_create")


def _align8(n: int) -> int:
    return (n + 7) & ~7


def layout(n_rows: int, nnz: int) -> tuple[int, int, int, int, int]:
    """Byte offsets in a slot of the cells (int64), row offsets (int32), column indices (int32) and values (4-byte),
    and the bytes used in all."""
    cells = _HEADER
    crow = cells + 8 * n_rows
    col = _align8(crow + 4 * (n_rows + 1))
    val = _align8(col + 4 * nnz)
    return cells, crow, col, val, _align8(val + 4 * nnz)


@dataclass
class SharedBatch:
    """A batch waiting in a worker's slot: what the training process needs to build its tensors. A batch the
    training process receives but never opens (the rest of a pass that was cut short) frees its slot when it is
    dropped."""

    pid: int
    slot: int
    fd: Any  # the slot's file descriptor (a DupFd) the first time the slot is sent, else None
    capacity: int
    n_rows: int
    n_genes: int
    nnz: int
    values: str  # "float32" or "int32"
    obs: dict[str, Any]
    #: Nonzeros the batch holds, when fewer than the room laid out for (``nnz``): a corpus's rows whose member genes
    #: outside the vocabulary were dropped. -1: ``nnz``.
    stored: int = -1
    #: The member of each row (a corpus's batch), else ``None``.
    members: Any = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pending = True  # received: its slot is freed when it is opened and its tensors die, or when it dies
        # Mapped as it arrives, while the worker is sure to be alive to hand over the descriptor: a DataLoader
        # stops a worker as soon as its end arrives, which may be before its earlier batches are taken.
        MAPS.map(self)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_pending"}

    def __del__(self) -> None:
        if self.__dict__.get("_pending"):
            try:
                MAPS.discard(self)
            except Exception:  # noqa: BLE001 - never raise from a finalizer; the worker then uses another slot
                pass


class _Slot:
    def __init__(self, capacity: int, shared: bool) -> None:
        if shared:
            self.fd = os.memfd_create("deltacells-batch")
            os.ftruncate(self.fd, capacity)
            self.map = mmap.mmap(self.fd, capacity)
        else:
            # Private: a child forked while a batch is alive gets its own copy, not the parent's next batches.
            self.fd = -1
            private = getattr(mmap, "MAP_PRIVATE", None)
            self.map = (mmap.mmap(-1, capacity) if private is None  # Windows: no fork to guard against
                        else mmap.mmap(-1, capacity, flags=private | mmap.MAP_ANONYMOUS))
        self.capacity = capacity
        self.state = np.frombuffer(self.map, np.int64, 1, 0)
        self.sent = False


class SlotPool:
    """A process's slots: memory files a worker hands over (``shared``), or anonymous memory for the training
    process's own batches."""

    def __init__(self, shared: bool) -> None:
        self.slots: list[_Slot] = []
        self.pid = os.getpid()
        self.shared = shared
        self.max_slots = MAX_SLOTS if shared else MAX_LOCAL_SLOTS
        # Slots are chosen under a lock: the training process gathers batches on a thread of its own, and a caller
        # may take batches on its own threads too.
        self._choosing = threading.Lock()

    def fill(self, ds: Any, cells: np.ndarray, values: Any, n_genes: int, obs: dict[str, Any]) -> SharedBatch | None:
        """Decodes the cells into a free slot (a new one if none is free and large enough); ``None`` when the
        pool has its most slots (:data:`MAX_SLOTS` for a worker, :data:`MAX_LOCAL_SLOTS` in the training process)
        and none is free."""
        nnz = ds.batch_nnz(cells)
        n = len(cells)
        c_cells, c_crow, c_col, c_val, used = layout(n, nnz)
        with self._choosing:
            k = next((i for i, s in enumerate(self.slots) if s.capacity >= used and s.state[0] == 0), None)
            if k is None:
                # A quarter spare, in whole granules: the room the loader's memory budget sets aside for it.
                new = _Slot(_core.batch_slot_bytes(used), self.shared)
                if len(self.slots) < self.max_slots:
                    self.slots.append(new)
                    k = len(self.slots) - 1
                else:
                    # A free slot too small for this batch gives way to a larger one (sent anew to the training
                    # process).
                    k = next((i for i, s in enumerate(self.slots) if s.state[0] == 0), None)
                    if k is None:
                        return None
                    self.slots[k] = new
            slot = self.slots[k]
            slot.state[0] = 1
        buf = slot.map
        np.frombuffer(buf, np.int64, n, c_cells)[:] = cells
        dtype = np.dtype(values)
        batch = ds.get_batch(cells, values_dtype=dtype, out_indices=np.frombuffer(buf, np.int32, nnz, c_col),
                             out_values=np.frombuffer(buf, dtype, nnz, c_val))
        np.frombuffer(buf, np.int32, n + 1, c_crow)[:] = batch.indptr
        fd = None
        if self.shared and not slot.sent:
            fd, slot.sent = DupFd(slot.fd), True
        stored = int(batch.indptr[-1]) if n else 0
        members = getattr(ds, "last_members", None)
        return SharedBatch(os.getpid(), k, fd, slot.capacity, n, n_genes, nnz, dtype.name, obs,
                           stored if stored != nnz else -1, None if members is None else np.asarray(members))

    def take(self, ds: Any, cells: np.ndarray, values: Any, n_genes: int, obs: dict[str, Any]) -> dict[str, Any] | None:
        """The batch ``{"X", "obs", "index"}`` decoded into one of this process's slots, its tensors views of it
        (``None`` as for :meth:`fill`)."""
        b = self.fill(ds, cells, values, n_genes, obs)
        return None if b is None else _views(self.slots[b.slot].map, b)


_POOLS: dict[bool, SlotPool] = {}


def pool(shared: bool = True) -> SlotPool:
    """This process's slots: memory files to hand to the training process (``shared``), or its own."""
    p = _POOLS.get(shared)
    if p is None or p.pid != os.getpid():
        p = _POOLS[shared] = SlotPool(shared)
    return p


def _release(state: np.ndarray) -> None:
    state[0] = 0


def _views(buf: mmap.mmap, b: SharedBatch) -> dict[str, Any]:
    """The batch in ``buf`` as ``{"X", "obs", "index"}``, views of it; the slot is freed with the last of them."""
    c_cells, c_crow, c_col, c_val, used = layout(b.n_rows, b.nnz)
    whole = np.frombuffer(buf, np.uint8, used, 0)
    weakref.finalize(whole, _release, np.frombuffer(buf, np.int64, 1, 0))
    t = torch.from_numpy(whole)
    del whole
    vtype = torch.float32 if b.values == "float32" else torch.int32
    stored = b.nnz if b.stored < 0 else b.stored
    x = torch.sparse_csr_tensor(
        t[c_crow : c_crow + 4 * (b.n_rows + 1)].view(torch.int32),
        t[c_col : c_col + 4 * stored].view(torch.int32),
        t[c_val : c_val + 4 * stored].view(vtype),
        size=(b.n_rows, b.n_genes),
        check_invariants=False,
    )
    # The cell indices are copied out (8 bytes a cell): a loop that keeps only each batch's indices (to match
    # predictions to cells) must not keep every slot, and the worker's memory, alive with them.
    out = {"X": x, "obs": b.obs, "index": t[c_cells : c_cells + 8 * b.n_rows].view(torch.int64).clone()}
    if b.members is not None:
        out["dataset"] = torch.from_numpy(b.members)
    return out


class SlotMaps:
    """The training process's mappings of the workers' slots (one registry for every loader of the process)."""

    def __init__(self) -> None:
        self.maps: dict[tuple[int, int], mmap.mmap] = {}
        # Batches are opened on the DataLoader's pin-memory thread when it pins, while a loader starting a pass
        # forgets exited workers on the caller's thread.
        self._lock = threading.Lock()

    def map(self, b: SharedBatch) -> mmap.mmap:
        key = (b.pid, b.slot)
        with self._lock:
            if b.fd is not None:
                fd, b.fd = b.fd.detach(), None
                try:
                    self.maps[key] = mmap.mmap(fd, b.capacity)
                finally:
                    os.close(fd)
            return self.maps[key]

    def open(self, b: SharedBatch) -> dict[str, Any]:
        """The batch's ``{"X", "obs", "index"}``, as views of the slot; the slot is freed with the last of them."""
        b._pending = False
        return _views(self.map(b), b)

    def discard(self, b: SharedBatch) -> None:
        """Frees the slot of a batch received but never opened."""
        b._pending = False
        _release(np.frombuffer(self.map(b), np.int64, 1, 0))

    def forget_exited(self) -> None:
        """Drops the mappings of workers that have exited (batches still alive keep theirs)."""
        with self._lock:
            self._forget_exited()

    def _forget_exited(self) -> None:
        alive: dict[int, bool] = {}
        for pid, _ in list(self.maps):
            if pid not in alive:
                try:
                    os.kill(pid, 0)
                    alive[pid] = True
                except ProcessLookupError:
                    alive[pid] = False
                except PermissionError:
                    alive[pid] = True
        self.maps = {k: m for k, m in self.maps.items() if alive[k[0]]}


MAPS = SlotMaps()
