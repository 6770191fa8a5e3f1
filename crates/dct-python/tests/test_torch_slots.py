"""Batches decoded into slots that are filled again once freed: from DataLoader workers (shared ``memfd`` slots)
and in the training process (its own anonymous slots); batches held are never overwritten, slots are reused, and
the training process hands its free memory back before forking workers."""

import gc
import os
import platform
import sys

import numpy as np
import pytest
from conftest import make_counts, require, write_dataset

torch = require("torch")

from deltacells.torch import DeltaCellsIterableDataset, make_loader  # noqa: E402

N, G, TILE = 470, 40, 50  # 10 tiles, the last of 20


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    full = make_counts(N, G, density=0.2, seed=64)
    return write_dataset(tmp_path_factory.mktemp("slots") / "ds", full, TILE), full


def _rows_of(batch):
    return batch["index"].tolist(), batch["X"].to_dense().numpy()


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_stay_intact_while_held(built, workers):
    """Batches are decoded into slots that are filled again once the training process has freed the batch (shared
    slots from workers, the process's own without): batches held (and views taken from them) are never
    overwritten."""
    root, full = built
    loader = make_loader(root, 16, num_workers=workers, seed=4)
    held = list(loader)
    values_view = held[0]["X"].values()
    expect_values = held[0]["X"].to_dense().numpy()[held[0]["X"].to_dense().numpy() != 0].copy()
    del held[0]
    assert len(held) == len(loader) - 1
    for b in held:
        idx, dense = _rows_of(b)
        assert np.array_equal(dense, full[idx].toarray())
    for _ in range(2):  # more passes while the view is alive
        for b in loader:
            idx, dense = _rows_of(b)
            assert np.array_equal(dense, full[idx].toarray())
    assert np.array_equal(values_view.numpy(), expect_values), "a view keeps its slot"


def test_worker_slots_are_reused_once_freed(built):
    from deltacells import _batch_slots

    root, full = built
    loader = make_loader(root, 16, num_workers=2, seed=5, persistent_workers=True)
    for _epoch in range(3):
        for b in loader:
            idx, dense = _rows_of(b)
            assert np.array_equal(dense, full[idx].toarray())
    # Passes cut short: the batches already sent but never taken free their slots when dropped.
    for _ in range(5):
        for k, _b in enumerate(loader):
            if k == 2:
                break
    workers = {w.pid for w in loader._iterator._workers}  # this loader's persistent worker processes
    slots = [key for key in _batch_slots.MAPS.maps if key[0] in workers]
    assert len(workers) == 2 and 2 <= len(slots) <= 2 * 6, f"{len(slots)} slots for {len(loader)} batches x 8 passes"


def test_keeping_each_batch_s_cell_indices_does_not_keep_its_slot(built):
    """A prediction loop keeps ``batch["index"]`` of every batch: the indices are the batch's own, and the slots
    (each a whole batch) are reused as if nothing were kept."""
    from deltacells import _batch_slots

    root, _ = built
    loader = make_loader(root, 16, num_workers=2, seed=5, persistent_workers=True, shuffle=False)
    kept = [b["index"] for b in loader]
    assert np.array_equal(np.sort(np.concatenate([k.numpy() for k in kept])), np.arange(sum(len(k) for k in kept)))
    workers = {w.pid for w in loader._iterator._workers}
    slots = [key for key in _batch_slots.MAPS.maps if key[0] in workers]
    assert len(kept) > 3 * 6 and len(slots) <= 2 * 6, f"{len(slots)} slots for {len(kept)} batches kept"


def test_the_slot_registry_takes_batches_and_forgets_exited_workers_from_two_threads(tmp_path):
    """Batches are mapped on the DataLoader's pin-memory thread while a loader starting a pass forgets exited
    workers on the caller's: neither may see the registry change under it, nor lose what the other added."""
    import threading

    from deltacells import _batch_slots

    backing = tmp_path / "slot"
    backing.write_bytes(bytes(4096))
    base = os.open(backing, os.O_RDWR)

    class Fd:
        def detach(self):
            return os.dup(base)

    class Batch:
        capacity = 4096

        def __init__(self, slot):
            self.pid, self.slot, self.fd = os.getpid(), slot, Fd()

    maps = _batch_slots.SlotMaps()
    errors = []
    n = 20_000

    def add():
        try:
            for i in range(n):
                maps.map(Batch(i)).close()  # its file descriptor back; the entry stays
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def forget():
        try:
            for _ in range(2_000):
                maps.forget_exited()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=add), threading.Thread(target=forget)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(base)
    assert not errors, errors
    assert len(maps.maps) == n, "a mapping of a live worker was lost"


def test_the_training_process_reuses_its_slots_once_freed(built):
    """Without workers, batches are decoded into the process's own slots: a batch freed before the next is taken
    leaves its slot for the next one, so every batch of a pass lives in one of a few slots."""
    from deltacells import _batch_slots

    root, full = built
    # An iteration another test left unfinished holds the batch gathered for it until it is collected.
    gc.collect()
    loader = make_loader(root, 16, seed=5)
    pool = _batch_slots.pool(shared=False)
    busy_before = sum(int(s.state[0] != 0) for s in pool.slots)

    def in_a_slot(t: torch.Tensor) -> bool:
        spans = [(np.frombuffer(s.map, np.uint8).ctypes.data, s.capacity) for s in pool.slots]
        return any(lo <= t.data_ptr() < lo + size for lo, size in spans)

    for _epoch in range(3):
        for b in loader:
            idx, dense = _rows_of(b)
            assert np.array_equal(dense, full[idx].toarray())
            assert in_a_slot(b["X"].values()), "the batch was decoded into a slot"
            assert not in_a_slot(b["index"]), "its cell indices are its own (kept alone, they keep no slot)"
            del b
    assert len(pool.slots) <= _batch_slots.MAX_LOCAL_SLOTS
    busy_after = sum(int(s.state[0] != 0) for s in pool.slots)
    assert busy_after == busy_before, "every slot is free once its batch is dropped"
    # Holding more batches than there are slots: the rest are ordinary tensors, all intact.
    held = list(loader)
    assert sum(in_a_slot(b["X"].values()) for b in held) <= _batch_slots.MAX_LOCAL_SLOTS < len(held)
    for b in held:
        idx, dense = _rows_of(b)
        assert np.array_equal(dense, full[idx].toarray())


def test_a_failed_read_gives_back_every_slot_it_was_offered(built):
    """A read into slots is offered every free slot; one that fails (a cell outside the dataset) leaves them all
    free, and the next reads use them."""
    import deltacells
    from deltacells import _batch_slots

    root, full = built
    ds = deltacells.open_dataset(root)
    pool = _batch_slots.SlotPool(shared=False)
    held = [pool.take(ds, np.arange(i, i + 8), np.float32, G, {}) for i in (0, 8)]
    assert len(pool.slots) == 2, "a batch held keeps its slot: the second needs another"
    del held
    gc.collect()
    assert [int(s.state[0]) for s in pool.slots] == [0, 0]
    with pytest.raises(IndexError):
        pool.fill(ds, np.array([3, N]), np.float32, G, {})
    assert [int(s.state[0]) for s in pool.slots] == [0, 0], "a failed read leaves no slot taken"
    b = pool.take(ds, np.arange(5, 12), np.float32, G, {})
    assert len(pool.slots) == 2 and sorted(int(s.state[0]) for s in pool.slots) == [0, 1]
    assert np.array_equal(b["X"].to_dense().numpy(), full[5:12].toarray())


def test_a_full_pool_gives_a_free_slot_too_small_for_a_batch_a_larger_one(built):
    """When no slot holds a batch and the pool has its most slots, a free one too small gives way to a larger one:
    the batch is read again into it (its tiles cached), and the pool does not grow."""
    import deltacells
    from deltacells import _batch_slots

    root, full = built
    ds = deltacells.open_dataset(root)
    pool = _batch_slots.SlotPool(shared=False)
    small = [pool.take(ds, np.array([c]), np.float32, G, {}) for c in range(_batch_slots.MAX_LOCAL_SLOTS)]
    assert len(pool.slots) == _batch_slots.MAX_LOCAL_SLOTS
    before = sorted(s.capacity for s in pool.slots)
    keep = small[0]  # one slot stays taken
    del small
    gc.collect()
    # Every cell five times: more than a small slot's 64 KiB.
    cells = np.tile(np.arange(N)[::-1], 5)
    b = pool.take(ds, cells, np.float32, G, {})
    assert b is not None and len(pool.slots) == _batch_slots.MAX_LOCAL_SLOTS
    after = sorted(s.capacity for s in pool.slots)
    assert after[:-1] == before[:-1] and after[-1] > before[-1], "one slot replaced by a larger one"
    assert np.array_equal(b["X"].to_dense().numpy(), full[cells].toarray())
    assert np.array_equal(keep["X"].to_dense().numpy(), full[[0]].toarray()), "the batch held is intact"
    assert sorted(int(s.state[0]) for s in pool.slots) == [0, 0, 1, 1]


@pytest.mark.parametrize("how", ["make_loader", "dataset"])
def test_the_next_batch_is_gathered_while_the_caller_holds_this_one(built, how):
    """Without workers, batch j+1 is gathered on the process's gathering thread while the caller works on batch j
    (a loop blocked in its training step does not wait for the gather after it); a caller that stops early leaves
    no gather running and its slots free; one thread serves every iteration."""
    import threading
    import time

    from deltacells import _batch_slots

    root, full = built
    gc.collect()  # iterations other tests left unfinished give their slots back
    pool = _batch_slots.pool(shared=False)

    def busy() -> int:
        return sum(int(s.state[0] == 1) for s in pool.slots)

    def gatherers() -> int:
        return sum(t.name.startswith("deltacells-batches") for t in threading.enumerate())

    def wait_for(condition) -> bool:
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        return condition()

    before = busy()
    # The loader and the dataset iterated itself (no DataLoader) take the same path.
    make = make_loader if how == "make_loader" else DeltaCellsIterableDataset
    it = iter(make(root, 16, seed=5))
    b0 = next(it)
    assert wait_for(lambda: busy() == before + 2), "batch 1 is gathered before the caller asks for it"
    other = iter(make(root, 16, seed=6))
    c0 = next(other)
    assert gatherers() == 1, "one gathering thread for every iteration of the process"
    b1 = next(it)
    for b in (b0, b1, c0):
        idx, dense = _rows_of(b)
        assert np.array_equal(dense, full[idx].toarray())
    del it, other
    gc.collect()
    del b, b0, b1, c0
    assert wait_for(lambda: busy() == before), "the batches gathered ahead give their slots back"


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _free_heap_blocks():
    """128 MiB of 64 KiB blocks (from glibc's heap, below its mmap threshold) freed, every other one of 256 MiB, so
    that they stay in the heap rather than being trimmed from its top; returns the blocks kept and the bytes freed."""
    blocks = [np.full(64 << 10, 7, np.uint8) for _ in range(4096)]
    return blocks[1::2], 2048 * (64 << 10)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc keeps freed blocks resident; other allocators are left as they are")
@pytest.mark.parametrize("persistent", [True, False])
def test_the_training_process_hands_back_its_free_memory_before_forking_workers(built, persistent):
    """glibc keeps freed blocks of its heap resident, and workers forked over them fault their own memory in
    slowly around them: before the DataLoader forks its workers (the first pass with persistent workers, every pass
    without), the loader hands them back to the system, and the training process's resident memory falls by about
    as much."""
    root, full = built
    loader = make_loader(root, 64, num_workers=1, seed=3, multiprocessing_context="fork",
                         persistent_workers=persistent)
    kept = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        more, freed = _free_heap_blocks()
        kept += more
        before = _resident_bytes()
        batches = iter(loader)
        first = next(batches)  # the workers (if not kept from the pass before) are forked as the pass starts
        after = _resident_bytes()
        if epoch == 0 or not persistent:
            assert before - after > freed // 2, f"epoch {epoch}: resident before the pass {before}, after {after}"
        else:
            # Workers kept from the pass before: nothing is forked, and the freed blocks stay.
            assert before - after < freed // 4, f"epoch {epoch}: resident before the pass {before}, after {after}"
        assert first["index"].shape[0] + sum(b["index"].shape[0] for b in batches) == N
    assert all(int(k[0]) == 7 and int(k[-1]) == 7 for k in kept)
