"""``python -m deltacells ...``: the ``deltacells`` command line."""

from deltacells.cli import main

raise SystemExit(main())
