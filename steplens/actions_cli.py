"""`steplens actions list|approve|undo`: the mitigation stage's audit trail, and an operator's word on it.

list: the decisions and actions from the `actions` table (ClickHouse), newest first;
approve ID: carry out a dry-run drain or relaunch (the node's guard rails still hold);
undo ID: resume the node a done action drained.
approve and undo read the action from the actions topic (the record the worker acts on), act through the
scheduler (Slurm's commands, `SLURM_CONF`) and record themselves there, as the `mitigate` principal.
Exit status: 0 done (list: rows), 1 refused or nothing found, 2 usage, 3 ClickHouse error.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from typing import Any

from infra.settings import Settings
from steplens import output
from steplens.history import open_history

EXIT_OK, EXIT_EMPTY, EXIT_USAGE = 0, 1, 2


def _list(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import action_history, run

    with open_history(s) as backend:
        result = run(backend, action_history(job=args.job or "", limit=args.limit))
    output.write(sys.stdout, args.format, result.columns, result.rows)
    return EXIT_OK if result.rows else EXIT_EMPTY


def _operator_word(args: argparse.Namespace, s: Settings) -> int:
    from streams.mitigate.scheduler import Slurm
    from streams.mitigate.worker import mitigator_for, record_action, recorded_actions

    if not s.mitigate_partition:
        print("steplens: error: set STEPLENS_MITIGATE_PARTITION: the Slurm partition the action is on",
              file=sys.stderr)
        return EXIT_USAGE
    action = recorded_actions(s).get(args.action_id)
    if action is None:
        print(f"steplens: no action {args.action_id!r} on the actions topic (`steplens actions list` shows them)",
              file=sys.stderr)
        return EXIT_EMPTY
    mitigator = mitigator_for(s, Slurm())
    by = args.by or getpass.getuser()
    now = time.time_ns()
    done = mitigator.approve(action, by, now) if args.actions_command == "approve" else mitigator.undo(action, by, now)
    record_action(s, done)
    print(f"{done.action_id}: {done.verdict}: {done.why}")
    return EXIT_OK if done.verdict == "act" else EXIT_EMPTY


def register(sub: Any, fmt: argparse.ArgumentParser) -> None:
    actions = sub.add_parser("actions", help="the mitigation stage's decisions and actions: list, approve, undo",
                             description=__doc__.split("\n\n")[0])
    verbs = actions.add_subparsers(dest="actions_command", metavar="ACTION", required=True)
    p = verbs.add_parser("list", help="decisions and actions, newest first (the actions table)", parents=[fmt])
    p.add_argument("--job", help="one job's")
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    p.set_defaults(handler=_list)
    for verb, text in (("approve", "carry out a dry-run drain or relaunch"),
                       ("undo", "resume the node a done action drained")):
        p = verbs.add_parser(verb, help=text, description=text)
        p.add_argument("action_id", help="as `steplens actions list` shows it, e.g. SLOW_HOST:job:node-7/drain")
        p.add_argument("--by", help="who (default: the login name)")
        p.set_defaults(handler=_operator_word)
