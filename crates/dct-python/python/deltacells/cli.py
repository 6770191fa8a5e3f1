"""The ``deltacells`` command line, run in this process: ``main(["info", "path/to/dataset"])``.

The same subcommands and flags as the ``deltacells`` binary (``deltacells --help``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from deltacells import _core

__all__ = ["console_main", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default: ``sys.argv[1:]``) and returns its exit status: 0 when all is well,
    1 when problems were found, 2 for usage errors."""
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return int(_core.run_cli([str(a) for a in args]))


def console_main() -> None:
    """The ``deltacells`` command that ``pip install`` puts on the PATH."""
    raise SystemExit(main())
