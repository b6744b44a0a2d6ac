"""`steplens`: one command line for the services, the workers, the demo and the fleet's history.

Exit status: 0 success (a query that returned rows); 1 a query that returned no rows, or
a command that failed (service error, demo found a miss); 2 usage error (bad arguments);
3 ClickHouse error (unreachable, bad database). Settings come from STEPLENS_* variables
over the TOML file named by --config or STEPLENS_CONFIG (infra/settings.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from infra.settings import Settings, load_settings
from steplens import actions_cli, model_cli, output, state_cli
from steplens.arguments import number
from steplens.history import open_history

EXIT_OK, EXIT_EMPTY, EXIT_USAGE, EXIT_BACKEND = 0, 1, 2, 3

Handler = Callable[[argparse.Namespace, Settings], int]


def _time_range(args: argparse.Namespace) -> Any:
    from steplens.queries import TimeRange

    return TimeRange.parse(args.since, args.until)


LATEST_JOB = "latest"
JOB_HELP = "a job id, or \"latest\": the job that reported last"


def _unknown_job(backend: Any, args: argparse.Namespace) -> bool:
    """True (and says so on stderr) when `--job` is named but the history has no rank of it: an unknown
    job gets a message and exit 1, never an empty table, report or trace that looks like an answer.
    `--job latest` is the job that reported last (e.g. the demo's, right after it): resolved here, in place."""
    job = getattr(args, "job", None)
    if not job:
        return False
    from sinks.backend import qualified

    topology = qualified(backend.database, "topology")

    def latest(n: int) -> list[str]:
        return [str(r[0]) for r in backend.query(
            f"SELECT job, max(seen_ns) AS seen FROM {topology} GROUP BY job ORDER BY seen DESC, job LIMIT {n}")]

    if job == LATEST_JOB:
        newest = latest(1)
        if newest:
            args.job = newest[0]
            print(f"steplens: --job latest is {newest[0]}", file=sys.stderr)
            return False
    elif backend.query(f"SELECT count() FROM {topology} WHERE job = %(job)s", {"job": job})[0][0]:
        return False
    known = latest(5)
    hint = f"; the latest jobs: {', '.join(known)}" if known else "; the history has no job yet"
    print(f"steplens: no job {job!r} in database {backend.database!r}{hint}", file=sys.stderr)
    return True


def _emit_query(args: argparse.Namespace, settings: Settings, build: Callable[[], Any]) -> int:
    from steplens.queries import run

    with open_history(settings) as backend:
        if _unknown_job(backend, args):
            return EXIT_EMPTY
        result = run(backend, build())
    output.write(sys.stdout, args.format, result.columns, result.rows)
    return EXIT_OK if result.rows else EXIT_EMPTY


def _ranks(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import slowest_ranks
    return _emit_query(args, s, lambda: slowest_ranks(args.job, _time_range(args), args.limit))


def _hosts(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import slowest_hosts
    return _emit_query(args, s, lambda: slowest_hosts(args.job, _time_range(args), args.limit))


def _incidents(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import incident_history
    return _emit_query(args, s, lambda: incident_history(
        job=args.job or "", rule=args.rule or "", host=args.host or "", rank=-1 if args.rank is None else args.rank,
        time_range=_time_range(args), limit=args.limit))


def _perf(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import job_performance, run
    from steplens.queries.expected import BREAKDOWN_COLUMNS, NO_MODELS, breakdown_rows, job_expectation, with_expected

    with open_history(s) as backend:
        if _unknown_job(backend, args):
            return EXIT_EMPTY
        result = run(backend, job_performance(args.job, args.recompute))
        expected = job_expectation(backend, args.job) if result.rows else None
    if expected is not None and expected.expectation is None:
        print(f"steplens: {NO_MODELS}", file=sys.stderr)
    if args.breakdown:
        rows = breakdown_rows(expected) if expected is not None else []
        if expected is not None and expected.expectation is not None:
            print(f"reference models v{expected.expectation.version}, steps {expected.step_first}-"
                  f"{expected.step_last}: {expected.expectation.summary()}", file=sys.stderr)
        output.write(sys.stdout, args.format, BREAKDOWN_COLUMNS, rows)
        return EXIT_OK if rows else EXIT_EMPTY
    columns, rows = with_expected(result.columns, result.rows, expected)
    output.write(sys.stdout, args.format, columns, rows)
    return EXIT_OK if rows else EXIT_EMPTY


def _memory(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries.memory import NO_MEMORY, rank_memory

    with open_history(s) as backend:
        if _unknown_job(backend, args):
            return EXIT_EMPTY
        columns, rows = rank_memory(backend, args.job, _time_range(args), args.limit)
    if not rows:
        print(f"steplens: {NO_MEMORY}", file=sys.stderr)
    output.write(sys.stdout, args.format, columns, rows)
    return EXIT_OK if rows else EXIT_EMPTY


def _offenders(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import recurrent_offenders
    return _emit_query(args, s, lambda: recurrent_offenders(_time_range(args), args.min_jobs, args.limit))


def _lost(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import device_hours_lost
    return _emit_query(args, s, lambda: device_hours_lost(args.job or "", _time_range(args), args.slow_ratio))


def _health(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries import device_health
    code = _emit_query(args, s, lambda: device_health(args.host or "", _time_range(args), args.limit))
    if code == EXIT_EMPTY:  # say why, not an empty table: health is read from device samples only
        print(f"steplens: no device sample from {'host ' + repr(args.host) if args.host else 'any host'} in this "
              "time range: device health comes from the node sampler's samples (`python -m producers.sampler` "
              "on each node, docs/hook.md), not from the steps", file=sys.stderr)
    return code


def _report(args: argparse.Namespace, s: Settings) -> int:
    from steplens.queries.report import collect
    from steplens.report_html import write

    with open_history(s) as backend:
        if _unknown_job(backend, args):
            return EXIT_EMPTY
        data = collect(backend, args.job or "", _time_range(args), progress=sys.stderr)
    if not data.series:
        print(f"steplens: no step in {'job ' + repr(args.job) if args.job else 'the history'} in this time range: "
              f"nothing to report, {args.output} not written", file=sys.stderr)
        return EXIT_EMPTY
    print(write(data, Path(args.output)))
    return EXIT_OK


def _span(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    try:
        lo = int(first)
        hi = int(last) if last else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N-M, got {text!r}") from None
    if hi < lo or lo < 0:
        raise argparse.ArgumentTypeError(f"empty range {text!r}")
    return lo, hi


def _timeline(args: argparse.Namespace, s: Settings) -> int:
    from steplens.perfetto import Selection, export

    (r0, r1), (s0, s1) = args.ranks, args.steps
    with open_history(s) as backend:
        if _unknown_job(backend, args):
            return EXIT_EMPTY
        trace = export(backend, Selection(args.job, r0, r1, s0, s1))
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    if not slices:
        print(f"steplens: job {args.job!r} has no step of ranks {r0}-{r1} in steps {s0}-{s1}: {args.output} not "
              "written", file=sys.stderr)
        return EXIT_EMPTY
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(trace))
    print(f"{args.output}: {slices} slices; open it in https://ui.perfetto.dev", file=sys.stderr)
    return EXIT_OK


def _migrate(args: argparse.Namespace, s: Settings) -> int:
    from sinks.features import Features
    from sinks.migrations import MIGRATIONS
    from sinks.migrations.cluster import cluster_statements

    if args.print_cluster:
        for migration in MIGRATIONS:
            for sql in cluster_statements(migration, s.clickhouse_database, Features.for_version(args.version),
                                          args.print_cluster):
                print(sql + ";\n")
        return EXIT_OK
    from sinks import open_backend
    from sinks.migrations.runner import migrate

    backend = open_backend(s)
    try:
        applied = migrate(backend, cluster=s.clickhouse_cluster)
    finally:
        backend.close()
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return EXIT_OK


def _services(args: argparse.Namespace, s: Settings) -> int:
    from infra.launcher.__main__ import main as infra_main

    return infra_main([args.command, *(["--only", args.only] if args.only else []),
                       *(["--cluster"] if args.cluster else [])])


def _demo(args: argparse.Namespace, s: Settings) -> int:
    from steplens import demo

    try:
        return demo.main(list(args.rest))
    except SystemExit as exc:  # the demo's own argparse: 0 for --help, 2 for a bad option
        return int(exc.code or 0)


def _worker(args: argparse.Namespace, s: Settings) -> int:
    from streams.__main__ import main as streams_main

    streams_main(["worker", "--role", args.role, "--loglevel", args.loglevel])
    return EXIT_OK


def _alerts_forward(args: argparse.Namespace, s: Settings) -> int:
    import logging

    from streams.alerts.run import forward

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    url = args.alertmanager or s.alertmanager_url
    if not url:
        print("steplens: error: no Alertmanager: pass --alertmanager URL or set STEPLENS_ALERTMANAGER_URL",
              file=sys.stderr)
        return EXIT_USAGE
    stats = forward(s, url, once=args.once)
    print(f"alerts: {stats.events} incident events read ({stats.replayed} replayed), {stats.posted} alerts posted, "
          f"{stats.post_failures} posts retried", file=sys.stderr)
    return EXIT_OK


def _when(text: str) -> str:
    """--since / --until: checked here, so a bad time is a usage error, never a traceback."""
    from steplens.queries import TimeRange

    try:
        TimeRange.parse(text, None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give an ISO time (2026-11-23 or 2026-11-23T04:00, UTC) or a span before "
            f"now like 90m, 6h, 7d ({exc})") from None
    return text


def _serve(args: argparse.Namespace, s: Settings) -> int:
    import logging

    from steplens.serve import LivePages, LiveServer

    logging.basicConfig(level=logging.WARNING)
    try:
        server = LiveServer(LivePages(s, refresh_s=args.refresh, window=args.window), args.port)
    except OSError as exc:
        print(f"steplens: error: cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_EMPTY
    print(f"live page: {server.url}  (fleet; /job/<job>, /incident/<id>); Ctrl-C stops it", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


def _version(text: str) -> tuple[int, int, int]:
    from sinks.backend import parse_version

    try:
        return parse_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="steplens", description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 ok, 1 no rows / command failed, 2 usage, 3 ClickHouse error. "
               "Long form: docs/cli.md.")
    parser.add_argument("--config", type=Path, help="TOML settings file (default: $STEPLENS_CONFIG)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    fmt = argparse.ArgumentParser(add_help=False)
    fmt.add_argument("--format", choices=output.FORMATS, default="table", help="output format (default table)")
    rng = argparse.ArgumentParser(add_help=False)
    rng.add_argument("--since", type=_when,
                     help="start: ISO time (UTC) or relative like 90m, 6h, 7d (default: all history)")
    rng.add_argument("--until", type=_when, help="end, same forms (default: now and later)")
    lim = argparse.ArgumentParser(add_help=False)
    lim.add_argument("--limit", type=number(int, 1), default=20, help="at most this many rows (default 20)")

    def add(name: str, handler: Handler, help_text: str, parents: Sequence[argparse.ArgumentParser] = ()) -> Any:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=list(parents))
        p.set_defaults(handler=handler)
        return p

    p = add("ranks", _ranks, "slowest ranks of a job over a time range (busy time vs the median rank)",
            [fmt, rng, lim])
    p.add_argument("--job", required=True, help=JOB_HELP)
    p = add("hosts", _hosts, "slowest hosts of a job over a time range", [fmt, rng, lim])
    p.add_argument("--job", required=True, help=JOB_HELP)
    p = add("incidents", _incidents, "incident history filtered by rule, host, rank or job", [fmt, rng, lim])
    p.add_argument("--job", help=JOB_HELP)
    p.add_argument("--rule", help="rule id: R1..R10, SLOW_STEP, SLOW_RANK, SLOW_HOST, ...")
    p.add_argument("--host")
    p.add_argument("--rank", type=number(int, 0))
    p = add("perf", _perf, "a job's step-time percentiles, tokens/s/p, MFU and HFU (spec §1), and the step "
            "time the fleet's reference models expect", [fmt])
    p.add_argument("--job", required=True, help=JOB_HELP)
    p.add_argument("--recompute", type=number(float, 1.0), default=1.0,
                   help="HFU/MFU FLOPs ratio: 4/3 = 1.333 with full recomputation (default 1)")
    p.add_argument("--breakdown", action="store_true",
                   help="per component (compute, each collective, exposed comm, host/data): observed vs the "
                        "fleet's reference models (docs/model.md)")
    p = add("memory", _memory, "a job's device memory per rank from its steps' allocator statistics: now, "
            "highest, growth per step, and what the declared model should take", [fmt, rng, lim])
    p.add_argument("--job", required=True, help=JOB_HELP)
    p = add("offenders", _offenders, "hosts named in incidents of several jobs: candidates to isolate",
            [fmt, rng, lim])
    p.add_argument("--min-jobs", type=number(int, 1), default=2, help="in at least this many jobs (default 2)")
    p = add("lost", _lost, "device-hours lost to slow steps and stragglers, per job", [fmt, rng])
    p.add_argument("--job", help=f"{JOB_HELP} (default: every job)")
    p.add_argument("--slow-ratio", type=number(float, 1.0, above=True), default=1.10,
                   help="slow step: above ratio x median (default 1.10)")
    p = add("health", _health, "device health per host: temperature, power swing, down-clocking", [fmt, rng, lim])
    p.add_argument("--host")
    p = add("report", _report, "write the self-contained HTML capacity report (job, cluster or time range)", [rng])
    p.add_argument("--job", help=f"{JOB_HELP} (default: the whole cluster)")
    p.add_argument("-o", "--output", default="reports/capacity.html", help="HTML file (default reports/capacity.html)")
    p = add("timeline", _timeline, "Chrome/Perfetto trace JSON of a job's ranks and steps")
    p.add_argument("--job", required=True, help=JOB_HELP)
    p.add_argument("--ranks", type=_span, required=True, help="N or N-M, e.g. 0-15")
    p.add_argument("--steps", type=_span, required=True, help="N or N-M, e.g. 3990-4010")
    p.add_argument("-o", "--output", default="reports/trace.json", help="JSON file (default reports/trace.json)")
    p = add("migrate", _migrate, "apply the ClickHouse migrations, or print the cluster-mode DDL")
    p.add_argument("--print-cluster", metavar="CLUSTER",
                   help="print ReplicatedMergeTree + Distributed DDL for this named cluster instead")
    p.add_argument("--version", type=_version, default=(26, 9, 2),
                   help="engine version the printed DDL targets (default 26.9.2)")
    for name in ("up", "down", "status"):
        p = add(name, _services, {"up": "start Kafka and ClickHouse on loopback", "down": "stop them",
                                  "status": "which services run, and where their logs are"}[name])
        p.add_argument("--only", choices=("kafka", "clickhouse", "alertmanager", "prometheus"))
        p.add_argument("--cluster", action="store_true",
                       help="the loopback cluster: 3 Kafka nodes, ZooKeeper, 2 shards x 2 ClickHouse replicas")
    help_text = "simulated job with injected faults through the real pipeline (steplens demo --help: its options)"
    p = sub.add_parser("demo", help=help_text, description=help_text, add_help=False)  # --help is the demo's
    p.set_defaults(handler=_demo, rest=[])
    p = add("worker", _worker, "run one worker (detect, land, parse, ...) in the foreground")
    p.add_argument("--role", choices=("detect", "land", "parse", "alerts", "mitigate"), required=True)
    p.add_argument("--loglevel", default="info")
    alerts = sub.add_parser("alerts", help="hand incidents to Prometheus Alertmanager",
                            description="hand incidents to Prometheus Alertmanager")
    alerts_sub = alerts.add_subparsers(dest="alerts_command", metavar="ACTION", required=True)
    help_text = ("read the incidents topic (as the `reader` principal) and post each incident to Alertmanager's "
                 "v2 API as one alert, re-sent while it fires, resolved when it resolves (docs/operations.md)")
    p = alerts_sub.add_parser("forward", help=help_text, description=help_text)
    p.set_defaults(handler=_alerts_forward)
    p.add_argument("--alertmanager", metavar="URL",
                   help="e.g. http://127.0.0.1:9093 (default $STEPLENS_ALERTMANAGER_URL)")
    p.add_argument("--once", action="store_true",
                   help="exit once every incident on the topic is posted and committed (default: run until SIGTERM)")
    p = add("serve", _serve, "the live page: jobs running, incidents open, mitigation actions, slowest ranks and "
            "hosts; each job's report; refreshed while the pipeline runs")
    p.add_argument("--port", type=number(int, 1), default=19480, help="port on 127.0.0.1 (default 19480)")
    p.add_argument("--refresh", type=number(float, 1.0), default=5.0, help="seconds between refreshes (default 5)")
    p.add_argument("--window", type=_when, default="1h", help="what 'now' covers: 10m, 1h, 6h (default 1h)")
    _register_analyse(sub)
    _register_replay(sub)
    model_cli.register(sub, fmt)
    actions_cli.register(sub, fmt)
    state_cli.register(sub, fmt)
    return parser


def _register_replay(sub: Any) -> None:
    """`steplens replay PATH...`: real profiler outputs through Kafka and the live detector (producers/replay/)."""
    from producers.replay.cli import DESCRIPTION, add_arguments

    p = sub.add_parser("replay", help="replay real profiler outputs through Kafka (Kineto, torch_npu, msprof)",
                       description=DESCRIPTION)
    add_arguments(p)

    def handler(args: argparse.Namespace, s: Settings) -> int:
        from producers.replay.cli import run

        return run(args, s)

    p.set_defaults(handler=handler)


def _register_analyse(sub: Any) -> None:
    """`steplens analyse PATH...`: the offline profile analyser (streams/profiles/cli.py), with its own options."""
    from streams.profiles.cli import DESCRIPTION, add_arguments

    p = sub.add_parser("analyse", help="diagnose profiler dumps offline (Kineto, Ascend, msprof)",
                       description=DESCRIPTION)
    add_arguments(p)

    def handler(args: argparse.Namespace, s: Settings) -> int:
        from streams.profiles.cli import run

        return run(args)

    p.set_defaults(handler=handler, analyse_parser=p)


# the service clients' loggers: they log each failed connection with its traceback (clickhouse-driver at WARNING)
# and each bootstrap attempt at INFO (kafka-python); the CLI reports a failure once, in its own words
_CLIENT_LOGGERS = ("clickhouse_driver", "kafka", "aiokafka", "urllib3", "chdb")


def _quiet_clients() -> None:
    import logging

    for name in _CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _service_of(exc: BaseException, s: Settings) -> str | None:
    """Which service a client's exception says is unreachable or failing, None when it is no client's."""
    module = type(exc).__module__
    if module.startswith(("kafka", "aiokafka")):
        return f"Kafka at {s.kafka_bootstrap}"
    if module.startswith("clickhouse_driver"):
        return "ClickHouse"
    if isinstance(exc, ConnectionError | TimeoutError):
        return "a service"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if getattr(args, "command", None) == "analyse":  # paths may follow its options (streams/profiles/cli.py)
            from streams.profiles.cli import take_paths

            take_paths(args.analyse_parser, args, extra)
        elif getattr(args, "command", None) == "demo":  # every option after `demo` is the demo's own
            args.rest = [a for a in extra if a != "--"]
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse: 0 for --help, 2 for usage errors
        return int(exc.code or 0)
    from sinks.backend import SinkError

    try:
        settings = load_settings(toml_path=args.config)
    except (OSError, ValueError) as exc:
        print(f"steplens: error: settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command != "worker":  # a worker logs as a service does; every other command says what failed itself
        _quiet_clients()
    try:
        code: int = args.handler(args, settings)
        sys.stdout.flush()
    except SinkError as exc:
        print(f"steplens: error: {exc}", file=sys.stderr)
        return EXIT_BACKEND
    except BrokenPipeError:  # `steplens ... | head`: the reader left; say nothing more to it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # a store that cannot be opened, a file that cannot be written: say which and why
        where = f" {exc.filename}" if exc.filename else ""
        print(f"steplens: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BACKEND
    except Exception as exc:  # a service's client failing (Kafka down): one line that names it, not a traceback
        from infra.clients import CredentialsError

        if isinstance(exc, CredentialsError):  # set-up, not a failure: what is missing and how to make it
            print(f"steplens: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        service = _service_of(exc, settings)
        if service is None:
            raise
        said = str(exc)
        print(f"steplens: error: {service}: {said if said.startswith(type(exc).__name__) else type(exc).__name__}"
              f"{'' if said.startswith(type(exc).__name__) else ': ' + said}", file=sys.stderr)
        return EXIT_BACKEND
    return code


if __name__ == "__main__":
    sys.exit(main())
