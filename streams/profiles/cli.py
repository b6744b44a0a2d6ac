"""`python -m streams.profiles analyse PATH...` (mounted as `steplens analyse`): offline diagnosis.

Directories or files, mixed formats (Kineto, torch_npu, msprof-analyze cluster output). Prints
the diagnosis and writes a self-contained HTML report. Exit status 2 when a dump cannot be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from streams.profiles.analysis.diagnose import diagnose
from streams.profiles.jsonstream import TraceFormatError
from streams.profiles.loader import load_all
from streams.profiles.report import html_report, text_report


class ProgressBar:
    """A one-line progress bar on stderr (only when it is a terminal, or when forced)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = 0.0

    def __call__(self, source: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        frac = min(done / total, 1.0) if total else 0.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r{Path(source).name[:40]:<40} [{bar:<30}] {frac:>4.0%} {done / 1e6:8.1f} MB")
        if total and done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="steplens", description="diagnose profiler dumps offline")
    sub = parser.add_subparsers(dest="command", required=True)
    analyse = sub.add_parser("analyse", help="parse dumps, print the diagnosis, write an HTML report")
    analyse.add_argument("paths", nargs="+", type=Path)
    analyse.add_argument("--html", type=Path, default=Path("steplens-report.html"), help="report path")
    analyse.add_argument("--progress", action="store_true", help="progress bar even when not a terminal")
    args = parser.parse_args(argv)
    bar = ProgressBar(args.progress or sys.stderr.isatty())
    try:
        profiles, clusters = load_all(args.paths, progress=bar)
    except TraceFormatError as exc:
        print(f"steplens: {exc}", file=sys.stderr)
        return 2
    diag = diagnose(profiles, clusters)
    print(text_report(diag))
    args.html.write_text(html_report(diag), encoding="utf-8")
    print(f"report: {args.html}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
