"""`steplens model fit|show|export|import`: the fleet's reference models (issue #44, docs/model.md).

fit: learn a new version from the fleet's history in ClickHouse (kernel summaries, topology,
     device kinds; steps under an incident left out) and store it;
show: the stored versions, or one version's curves and kernel benchmarks as a table;
export / import: a version as JSON, so a new fleet starts from another's reference and the
     detect worker reads it (`STEPLENS_REFERENCE_MODELS`).
Exit status as the rest of the CLI: 0 ok, 1 nothing found, 2 usage, 3 ClickHouse error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from infra.settings import Settings
from steplens import output
from steplens.arguments import number
from steplens.history import open_history

EXIT_OK, EXIT_EMPTY, EXIT_USAGE = 0, 1, 2


def _fit(args: argparse.Namespace, s: Settings) -> int:
    from streams.model.fit import fit_from_history
    from streams.model.store import save

    with open_history(s) as backend:
        models = fit_from_history(backend, stack=args.stack, min_jobs=args.min_jobs)
        if not models.curves and not models.kernels:
            print("steplens: nothing to learn from: no kernel summaries outside incidents in this database",
                  file=sys.stderr)
            return EXIT_EMPTY
        version = save(backend, models)
    print(f"reference models v{version}: {len(models.curves)} collective curves, "
          f"{len(models.kernels)} kernel benchmarks")
    return EXIT_OK


def _show(args: argparse.Namespace, s: Settings) -> int:
    from streams.model.store import load, versions

    with open_history(s) as backend:
        if args.version is None and not args.latest:
            rows = [(v, stack, curves, kernels) for v, stack, curves, kernels, _ in versions(backend)]
            output.write(sys.stdout, args.format, ("version", "stack", "curves", "kernels"), rows)
            return EXIT_OK if rows else EXIT_EMPTY
        models = load(backend, args.version)
    if models is None:
        print(f"steplens: no reference models{'' if args.version is None else f' v{args.version}'} stored",
              file=sys.stderr)
        return EXIT_EMPTY
    rows_out: list[tuple[Any, ...]] = [
        ("curve", f"{c.op}/{c.link}/{c.group_size}", round(c.t_s_ns / 1e3, 2), round(c.bw_max, 2),
         round(c.fit_error, 4), c.samples) for c in models.curves]
    rows_out += [("kernel", f"{k.key}@{k.device_kind}", round(k.p10 / 1e12, 1), round(k.p50 / 1e12, 1),
                  round(k.p90 / 1e12, 1), k.jobs) for k in models.kernels]
    output.write(sys.stdout, args.format, ("kind", "model", "t_s_us|p10_tflops", "bw_gbps|p50_tflops",
                                           "fit_error|p90_tflops", "samples|jobs"), rows_out)
    return EXIT_OK


def _export(args: argparse.Namespace, s: Settings) -> int:
    from streams.model.store import load

    with open_history(s) as backend:
        models = load(backend, args.version)
    if models is None:
        print("steplens: no reference models stored: run `steplens model fit` first", file=sys.stderr)
        return EXIT_EMPTY
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(models.to_json())
    print(f"{out}: reference models v{models.version}")
    return EXIT_OK


def _import(args: argparse.Namespace, s: Settings) -> int:
    from streams.model.reference import ReferenceModels
    from streams.model.store import save

    try:
        models = ReferenceModels.from_json(Path(args.path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        print(f"steplens: error: {args.path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with open_history(s) as backend:
        version = save(backend, models)
    print(f"{args.path}: stored as reference models v{version}")
    return EXIT_OK


def register(sub: Any, fmt: argparse.ArgumentParser) -> None:
    model = sub.add_parser("model", help="the fleet's reference models: what a job should achieve",
                           description=__doc__.split("\n\n")[0])
    actions = model.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    p = actions.add_parser("fit", help="learn a new version from the fleet's history and store it")
    p.add_argument("--stack", default="", help="the software stack it describes, e.g. 'cann-8.0 torch-2.4'")
    p.add_argument("--min-jobs", type=number(int, 1), default=1,
                   help="a kernel benchmark needs this many jobs (default 1)")
    p.set_defaults(handler=_fit)
    p = actions.add_parser("show", help="the stored versions, or one version's models", parents=[fmt])
    p.add_argument("--version", type=number(int, 1), help="one version's models")
    p.add_argument("--latest", action="store_true", help="the newest version's models")
    p.set_defaults(handler=_show)
    p = actions.add_parser("export", help="write a version as JSON (default: the newest)")
    p.add_argument("--version", type=number(int, 1))
    p.add_argument("-o", "--output", required=True, help="JSON file")
    p.set_defaults(handler=_export)
    p = actions.add_parser("import", help="store a JSON export as a new version")
    p.add_argument("path")
    p.set_defaults(handler=_import)
