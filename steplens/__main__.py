"""`python -m steplens ...`: the same CLI as the `steplens` command (every subcommand, `demo` included)."""

from __future__ import annotations

import sys

from steplens.cli import main

if __name__ == "__main__":
    sys.exit(main())
