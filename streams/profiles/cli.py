"""`python -m streams.profiles analyse PATH...` (mounted as `steplens analyse`): offline diagnosis.

Directories or files, mixed formats (Kineto, torch_npu, msprof-analyze cluster output, a lone
`cluster_step_trace_time.csv`), options before, between or after the paths. Prints the
diagnosis and writes a self-contained HTML report. Exit status 2 when a dump cannot be read or
the arguments are wrong; files met while walking a folder that are not dumps are skipped with a
warning on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DESCRIPTION = ("parse profiler dumps (Kineto .json[.gz], torch_npu *_ascend_pt folders, msprof-analyze cluster "
               "output or its cluster_step_trace_time.csv), print the diagnosis and write an HTML report")


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `analyse` options, shared by `steplens analyse` and `python -m streams.profiles analyse`."""
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="trace file, *_ascend_pt folder, cluster_analysis_output folder or CSV, or a folder "
                             "holding any of them")
    parser.add_argument("--html", type=Path, default=Path("steplens-report.html"),
                        help="report path (default steplens-report.html)")
    parser.add_argument("--progress", action="store_true", help="progress bar even when not a terminal")


def take_paths(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Paths after an option land in `extra` (argparse takes one run of positionals): append them.

    Why not `parse_intermixed_args`: it refuses parsers with subcommands, which both front ends have.
    """
    unknown = [e for e in extra if e.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.paths = [*args.paths, *(Path(e) for e in extra)]
    if not args.paths:
        parser.error("analyse: at least one PATH is required")


def run(args: argparse.Namespace) -> int:
    # imported here: `steplens` builds this parser for every command, the analysis is only needed now
    from streams.profiles.analysis.diagnose import diagnose
    from streams.profiles.jsonstream import TraceFormatError
    from streams.profiles.loader import load_all
    from streams.profiles.report import html_report, text_report

    bar = ProgressBar(args.progress or sys.stderr.isatty())

    def warn(message: str) -> None:
        print(f"steplens: warning: {message}", file=sys.stderr)

    try:
        profiles, clusters = load_all(args.paths, progress=bar, warn=warn)
    except TraceFormatError as exc:
        print(f"steplens: {exc}", file=sys.stderr)
        return 2
    diag = diagnose(profiles, clusters)
    print(text_report(diag))
    args.html.write_text(html_report(diag), encoding="utf-8")
    print(f"report: {args.html}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streams.profiles", description="diagnose profiler dumps offline")
    sub = parser.add_subparsers(dest="command", required=True)
    analyse = sub.add_parser("analyse", help=DESCRIPTION, description=DESCRIPTION)
    add_arguments(analyse)
    try:
        args, extra = parser.parse_known_args(argv)
        take_paths(analyse, args, extra)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for usage errors
        return int(exc.code or 0)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
