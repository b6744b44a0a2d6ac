"""`python -m steplens demo [...]`."""

from __future__ import annotations

import sys

from steplens import demo


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] != "demo":
        print("usage: python -m steplens demo [--steps N] [--seed S] [--clickhouse embedded|server]", file=sys.stderr)
        return 2
    return demo.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
