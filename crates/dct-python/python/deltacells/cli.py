"""The ``deltacells`` command line, run in this process: ``main(["info", "path/to/dataset"])``.

The same subcommands and flags as the ``deltacells`` binary (``deltacells --help``). Its output goes through
``sys.stdout`` and ``sys.stderr``, so it can be captured (``contextlib.redirect_stdout``, a notebook, a test) as the
original package's can.
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from deltacells import _core

__all__ = ["console_main", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default: ``sys.argv[1:]``) and returns its exit status: 0 when all is well,
    1 when problems were found, 2 for usage errors. What it prints goes to ``sys.stdout`` and ``sys.stderr``."""
    args = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    sys.stdout.flush()
    sys.stderr.flush()
    redirected = [(fd, stream) for fd, stream in ((1, sys.stdout), (2, sys.stderr)) if not _is_fd(stream, fd)]
    if not redirected:
        return int(_core.run_cli(args))  # straight to the terminal (progress bars and all)
    return _run_through(args, redirected)


def _is_fd(stream: Any, fd: int) -> bool:
    """Whether ``stream`` writes to the process's file descriptor ``fd``."""
    try:
        return bool(stream.fileno() == fd)
    except (AttributeError, OSError, ValueError):
        return False


def _run_through(args: list[str], redirected: list[tuple[int, TextIO]]) -> int:
    # The command writes to file descriptors 1 and 2. For the call, each one whose Python stream is something else
    # is pointed at a pipe, and what comes through is copied to the stream as it comes.
    saved: list[tuple[int, int]] = []
    pumps: list[threading.Thread] = []
    failures: list[Exception] = []
    try:
        for fd, stream in redirected:
            read_end, write_end = os.pipe()
            saved.append((fd, os.dup(fd)))
            os.dup2(write_end, fd)
            os.close(write_end)
            pump = threading.Thread(target=_pump, args=(read_end, stream, failures), daemon=True)
            pump.start()
            pumps.append(pump)
        status = int(_core.run_cli(args))
    finally:
        for fd, original in saved:
            os.dup2(original, fd)  # the pipe's last write end closes: its pump reads to the end
            os.close(original)
        for pump in pumps:
            pump.join()
    if failures:
        # The caller's stream refused the output (closed, a broken pipe): the command stopped writing there, as
        # it does on a closed pipe; the error is the caller's to see, here rather than in a thread's traceback.
        raise failures[0]
    return status


def _pump(read_end: int, stream: TextIO, failures: list[Exception]) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        try:
            while chunk := pipe.read(1 << 16):
                stream.write(decoder.decode(chunk))
            stream.write(decoder.decode(b"", final=True))
            stream.flush()
        except Exception as e:  # noqa: BLE001 (whatever the stream raises reaches the caller of main)
            failures.append(e)  # closing the pipe's read end ends the command's writes quietly


def console_main() -> None:
    """The ``deltacells`` command that ``pip install`` puts on the PATH."""
    raise SystemExit(main())
