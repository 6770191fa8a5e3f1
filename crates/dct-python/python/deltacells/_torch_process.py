"""Where this process stands in a training job: its rank (from ``torch.distributed`` or ``torchrun``'s
variables), the DataLoader workers of the pass it serves, whether it is spawning a process, and the one thread that
gathers the next batch of every loader without workers."""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing.context
import os
import threading
from collections.abc import Iterator

import torch.utils.data

from deltacells import _core

__all__ = ["distributed_ranks", "gathering_pool", "gathering_thread", "spawning", "stop_gathering", "worker_count"]


def distributed_ranks() -> tuple[int, int] | None:
    """``(rank, world_size)`` of this process: from an initialised ``torch.distributed``, else from the ``RANK`` and
    ``WORLD_SIZE`` variables that ``torchrun`` sets (a spawned DataLoader worker has no process group but inherits
    them); ``None`` when neither says."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        try:
            return int(rank), int(world)
        except ValueError:
            return None
    return None


def worker_count() -> int:
    """The DataLoader workers of the pass this process serves (1 outside a worker: the same split as none)."""
    info = torch.utils.data.get_worker_info()
    return 1 if info is None else max(1, int(info.num_workers))


def spawning() -> bool:
    """Whether this process is pickling a new process's arguments (shared memory may go along then)."""
    return multiprocessing.context.get_spawning_popen() is not None


_GATHERER: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_GATHERING: list[threading.Thread | None] = [None]


def _mark_gathering_thread() -> None:
    _GATHERING[0] = threading.current_thread()
    _core.watch_gathering_thread()  # its storage waits give up when a loop is left on Ctrl-C (stop_gathering)


@contextlib.contextmanager
def stop_gathering() -> Iterator[None]:
    """Within: the gathering thread's storage waits give up (its gather fails), so that a loop left on an exception
    (Ctrl-C) need not wait for a read from storage that has stopped answering."""
    _core.stop_gathering(True)
    try:
        yield
    finally:
        _core.stop_gathering(False)


def gathering_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The thread that gathers the next batch of every loader without workers in this process (one for the
    process, made when first needed; a forked child makes its own)."""
    global _GATHERER
    if _GATHERER is None or _GATHERER[0] != os.getpid():
        pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="deltacells-batches", initializer=_mark_gathering_thread
        )
        _GATHERER = (os.getpid(), pool)
    return _GATHERER[1]


def gathering_thread() -> threading.Thread | None:
    """The gathering thread, once it has run (so that an iteration ended on it does not wait for itself)."""
    return _GATHERING[0]
