"""`steplens state list|dump`: the detect workers' per-job snapshots, as written on the state topic.

list: every job with a snapshot, its format and size;
dump: one job's snapshot as JSON (format SLD1, docs/detection.md "The snapshot format"): its objects by
      stable type name and number, their fields, each array's dtype, shape and first values.
Exit status as the rest of the CLI: 0 ok, 1 nothing found, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from infra.settings import Settings
from steplens import output
from steplens.arguments import number

EXIT_OK, EXIT_EMPTY, EXIT_USAGE = 0, 1, 2


def _snapshots(s: Settings) -> dict[str, bytes]:
    from streams.detect.state.store import SnapshotStore
    from streams.topics_admin import DetectTopics

    store = SnapshotStore(s, DetectTopics(s.topic_prefix).state)
    try:
        return store.load_raw()
    finally:
        store.close()


def _list(args: argparse.Namespace, s: Settings) -> int:
    rows = [(job, bytes(raw[:4]).decode("ascii", "replace"), len(raw)) for job, raw in sorted(_snapshots(s).items())]
    output.write(sys.stdout, args.format, ("job", "format", "bytes"), rows)
    return EXIT_OK if rows else EXIT_EMPTY


def _dump(args: argparse.Namespace, s: Settings) -> int:
    from streams.detect.state import format as snapshot_format

    raw = _snapshots(s).get(args.job)
    if raw is None:
        print(f"steplens: no snapshot of job {args.job!r} on the state topic", file=sys.stderr)
        return EXIT_EMPTY
    if bytes(raw[:4]) != snapshot_format.MAGIC:
        print(f"steplens: job {args.job!r}: its snapshot is format {bytes(raw[:4])!r}, written before "
              f"{snapshot_format.MAGIC.decode()}: its next one (the worker migrates it) can be shown", file=sys.stderr)
        return EXIT_EMPTY
    shown: Any = snapshot_format.dump(raw, values=args.values)
    sys.stdout.buffer.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
    return EXIT_OK


def register(sub: Any, fmt: argparse.ArgumentParser) -> None:
    state = sub.add_parser("state", help="the detect workers' per-job snapshots (list, or dump one as JSON)",
                           description=__doc__.split("\n\n")[0])
    actions = state.add_subparsers(dest="state_command", metavar="ACTION", required=True)
    p = actions.add_parser("list", help="every job with a snapshot: its format and size", parents=[fmt])
    p.set_defaults(handler=_list)
    p = actions.add_parser("dump", help="one job's snapshot as JSON: objects by stable type name, fields, arrays")
    p.add_argument("--job", required=True, help="job id")
    p.add_argument("--values", type=number(int, 0), default=8, help="values shown of each array (default 8)")
    p.set_defaults(handler=_dump)
