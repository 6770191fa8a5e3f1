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

# A slot's header: its state (0 free, 1 holding a batch the training process may still read, 2 offered to a read
# in progress), then padding; the batch follows, laid out as ``_core.slot_layout`` says (the reader writes it there).
_FREE, _HOLDING, _OFFERED = 0, 1, 2
_HEADER = _core.SLOT_HEADER
# Slots a worker makes at most; past them (the training process holds on to that many batches, or dropped them
# unopened without freeing them) a batch goes as an ordinary tensor.
MAX_SLOTS = 64
# The training process's own slots: a training step holds a batch or two (and a pin-memory thread one more), so
# a few slots serve every batch. They live as long as the process, so a caller that holds many batches at once
# gets the rest as ordinary tensors rather than the process keeping that many batches' memory for good.
MAX_LOCAL_SLOTS = 4

AVAILABLE = hasattr(os, "memfd_create")

#: Byte offsets in a slot of a batch's cells (int64), row offsets (int32), column indices (int32) and values
#: (4-byte), and the bytes it uses: ``layout(n_rows, nnz)``.
layout = _core.slot_layout

_VALUE_NAMES = {np.float32: "float32", np.int32: "int32"}


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
        # What the reader writes into: the slot past its header.
        self.body = np.frombuffer(self.map, np.uint8, capacity - _HEADER, _HEADER)
        self.sent = False

    def __del__(self) -> None:
        # The mapping stays while batches use it (it holds a descriptor of its own); this one is only needed to send
        # the slot, which duplicates it.
        if getattr(self, "fd", -1) >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


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
        """Reads the cells into a free slot (a new one if none is free and large enough); ``None`` when the
        pool has its most slots (:data:`MAX_SLOTS` for a worker, :data:`MAX_LOCAL_SLOTS` in the training process)
        and none is free. The batch is planned once: every free slot is offered to the reader, which writes the
        batch into the first that holds it once it knows the batch's size. Offered slots are not free meanwhile, so
        a fill on another thread of the same pool then makes a slot of its own (or, in a full pool, gets ``None``).
        A batch no free slot holds is read again into a new slot (its tiles stay cached)."""
        name = _VALUE_NAMES.get(values) or np.dtype(values).name
        with self._choosing:
            offered = [k for k, s in enumerate(self.slots) if s.state[0] == _FREE]
            if not offered and len(self.slots) >= self.max_slots:
                return None
            for k in offered:
                self.slots[k].state[0] = _OFFERED
        k, made = -1, None
        try:
            chosen, nnz, used, members = ds._fill_slot(cells, name, [self.slots[j].body for j in offered])
            if chosen < 0:
                made = self._new_slot(used, offered)
                if made is None:
                    return None
                chosen, nnz, used, members = ds._fill_slot(cells, name, [self.slots[made].body])
                if chosen < 0:
                    raise RuntimeError(f"a slot of {self.slots[made].capacity} bytes made for a batch of {used} "
                                       "bytes did not hold it")
                k = made
            else:
                k = offered[chosen]
        finally:
            # The chosen slot holds the batch; the others offered are free again (all of them if the read failed).
            with self._choosing:
                for j in [*offered, *([] if made is None else [made])]:
                    self.slots[j].state[0] = _HOLDING if j == k else _FREE
        slot = self.slots[k]
        fd = None
        if self.shared and not slot.sent:
            fd, slot.sent = DupFd(slot.fd), True
        return SharedBatch(os.getpid(), k, fd, slot.capacity, len(cells), n_genes, nnz, name, obs, members)

    def _new_slot(self, used: int, offered: list[int]) -> int | None:
        """A new slot, offered, for a batch of ``used`` bytes that none of the free slots ``offered`` holds: added
        while the pool has room, else in place of one of them; ``None`` if the pool is full and none was free."""
        with self._choosing:
            room = len(self.slots) < self.max_slots
            if not room and not offered:
                return None
            # A quarter spare, in whole granules: the room the loader's memory budget sets aside for it. (Made before
            # anything changes, so that a failure leaves the pool as it was.)
            new = _Slot(_core.batch_slot_bytes(used), self.shared)
            new.state[0] = _OFFERED
            if room:
                self.slots.append(new)
                return len(self.slots) - 1
            # A free slot too small for this batch gives way to a larger one (sent anew to the training process).
            k = offered.pop()
            self.slots[k] = new
            return k

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
    # One array of the slot's bytes that every view derives from (numpy views keep it as their base), so that its
    # finalizer runs when the last of them dies. numpy's views are cheaper to make than torch's.
    whole = np.frombuffer(buf, np.uint8, used, 0)
    weakref.finalize(whole, _release, np.frombuffer(buf, np.int64, 1, 0))
    vtype = np.float32 if b.values == "float32" else np.int32
    x = torch.sparse_csr_tensor(
        torch.from_numpy(whole[c_crow : c_crow + 4 * (b.n_rows + 1)].view(np.int32)),
        torch.from_numpy(whole[c_col : c_col + 4 * b.nnz].view(np.int32)),
        torch.from_numpy(whole[c_val : c_val + 4 * b.nnz].view(vtype)),
        size=(b.n_rows, b.n_genes),
        check_invariants=False,
    )
    # The cell indices are copied out (8 bytes a cell): a loop that keeps only each batch's indices (to match
    # predictions to cells) must not keep every slot, and the worker's memory, alive with them.
    index = torch.from_numpy(whole[c_cells : c_cells + 8 * b.n_rows].view(np.int64).copy())
    out = {"X": x, "obs": b.obs, "index": index}
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
