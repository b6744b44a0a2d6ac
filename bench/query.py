"""`make bench-query`: fleet-scale history in the embedded engine, then every CLI query, timed.

Loads a 10,240-rank job (100 M step rows by default) plus kernel summaries, device
samples and a fleet's incidents with INSERT ... SELECT FROM numbers() (generated inside
the engine, so the materialized-view rollups fill exactly as on ingest), measures ingest
through the real path (events -> sinks.rows -> BatchingWriter -> insert) separately, runs
each CLI query `--runs` times and writes bench/results/query.json.

Use --rows to scale down while developing (e.g. --rows 5000000).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.provenance import git_commit, machine
from schemas import Domain, Phases, StepEvent
from sinks.backend import Backend
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import rows_for
from sinks.writer import BatchingWriter
from steplens import output
from steplens.perfetto import Selection, export
from steplens.queries import TimeRange, fleet, run
from steplens.queries.base import FleetQuery
from steplens.queries.report import heat_bins, heat_query, series_query, step_times_query

REPO = Path(__file__).resolve().parents[1]
JOB = "bench-llm-10k"
T0 = (int(time.time()) // 86_400 - 2) * 86_400 * 10**9  # two days ago: inside every TTL
SLOW_RANK, SLOW_EVERY = 7777, 997
DASHBOARD_P95_S, ADHOC_P95_S = 0.2, 2.0


def generate_steps(backend: Backend, ranks: int, steps: int, chunk_rows: int, log: Callable[[str], None]) -> int:
    """One job's rank-steps, a straggler rank and periodic slow steps, generated in the engine."""
    db = f"`{backend.database}`"
    total = ranks * steps
    for first in range(0, total, chunk_rows):
        n = min(chunk_rows, total - first)
        backend.execute(
            f"INSERT INTO {db}.steps (job, rank, step, world, host, device, dp_group, tp_group, pp_group, ep_group, "
            "cp_group, pp_stage, start_ns, end_ns, duration_ms, data_ms, forward_ms, backward_ms, optimizer_ms, "
            "comm_exposed_ms, gc_ms, samples, tokens, flops, peak_flops, profiling, event_date, ingested_ns) "
            f"SELECT '{JOB}', r, s, {ranks}, concat('node-', toString(intDiv(r, 8))), r % 8, r % 64, intDiv(r, 8), "
            "intDiv(r, 512), -1, -1, intDiv(r % 512, 64), st, st + toInt64(dur * 1e6), dur, 3., busy * 0.3, "
            "busy * 0.6, busy * 0.1 - 3., dur - busy, 0., 8, 32768, 158.2e12, 989e12, 0, "
            f"toDate(intDiv(st, 1000000000)), {T0} "
            "FROM (SELECT r, s, st, busy, slowest + 5. AS dur FROM (SELECT r, s, "
            f"toInt64({T0}) + toInt64(s) * 1000000000 AS st, "
            f"if(s % {SLOW_EVERY} = 0, 1.5, 1.) AS f, 400. * f * if(r = {SLOW_RANK}, 1.25, 1.) "
            "+ (cityHash64(r, s) % 1000) / 100. AS busy, 400. * f * 1.25 + 10. AS slowest "
            f"FROM (SELECT toUInt32(number % {ranks}) AS r, toUInt64(intDiv(number, {ranks})) AS s "
            f"FROM numbers({first}, {n}))))"
        )
        log(f"  steps {first + n:,}/{total:,}")
    return total


def generate_other(backend: Backend, ranks: int, steps: int) -> dict[str, int]:
    db = f"`{backend.database}`"
    summary_steps = min(steps, 500)
    backend.execute(
        f"INSERT INTO {db}.kernel_summaries (job, rank, step, host, device, entry, entries, key, cat, count, total_ns, "
        "metric, flops, op, domain, bytes, other_count, other_ns, dropped, event_date, ingested_ns) "
        f"SELECT '{JOB}', toUInt32(intDiv(number, 2) % {ranks}), intDiv(number, {2 * ranks}), "
        f"concat('node-', toString(intDiv(intDiv(number, 2) % {ranks}, 8))), (intDiv(number, 2) % {ranks}) % 8, "
        "number % 2, 2, if(number % 2 = 0, 'F2:4096x4096x4096', 'allreduce/dp'), "
        "if(number % 2 = 0, 'compute', 'comm'), "
        "12, 90000000, if(number % 2 = 0, 'F2', NULL), 1.6e12, if(number % 2 = 0, NULL, 'allreduce'), "
        f"if(number % 2 = 0, NULL, 'dp'), 268435456, 40, 5000000, 0, toDate(intDiv({T0}, 1000000000)), {T0} "
        f"FROM numbers({2 * ranks * summary_steps})"
    )
    ticks = max(1, steps // 10)  # one sample per device every 10 s of the job
    backend.execute(
        f"INSERT INTO {db}.device_samples (host, device, ts_ns, job, rank, device_kind, power_w, temp_c, aicore_pct, "
        "freq_mhz, event_date, ingested_ns) "
        f"SELECT concat('node-', toString(intDiv(d, 8))), d % 8, toInt64({T0}) + toInt64(t) * 10000000000, '{JOB}', d, "
        "'npu', 300. + (cityHash64(d, t) % 30), if(intDiv(d, 8) = 97, 91., 60. + (cityHash64(t, d) % 10)), 80., "
        f"if(intDiv(d, 8) = 97, 1450., 1800.), toDate(intDiv(toInt64({T0}) + toInt64(t) * 10000000000, 1000000000)), "
        f"{T0} FROM (SELECT toUInt32(number % {ranks}) AS d, intDiv(number, {ranks}) AS t "
        f"FROM numbers({ranks * ticks}))"
    )
    backend.execute(
        f"INSERT INTO {db}.incidents (incident_id, job, rule, state, severity, scope, summary, `group`, ranks, host, "
        "device, step_first, step_last, observed, expected, evidence_keys, evidence_values, detected_ns, event_date) "
        "SELECT concat('inc-', toString(number)), concat('job-', toString(number % 50)), "
        "if(number % 5 = 0, 'SLOW_STEP', 'SLOW_RANK'), 'open', 'warning', 'rank', 'bench incident', -1, "
        "[toUInt32(number % 1024)], concat('node-', toString(if(number % 7 = 0, 13, number % 1280))), -1, "
        f"toInt64(number % 9000), toInt64(number % 9000 + 3), 650., 500., [], [], toInt64({T0}) + toInt64(number) "
        f"* 60000000000, toDate(intDiv({T0}, 1000000000)) FROM numbers(5000)"
    )
    return {"kernel_summaries": 2 * ranks * summary_steps, "device_samples": ranks * ticks, "incidents": 5000}


def measured_ingest(backend: Backend, ranks: int, steps: int) -> tuple[int, float]:
    """Events through the real path: StepEvent -> rows_for -> BatchingWriter (dedup tokens) -> insert."""
    events = []
    for s in range(steps):
        for r in range(ranks):
            start = T0 + s * 10**9
            events.append(StepEvent(job="bench-ingest", rank=r, world=ranks, host=f"node-{r // 8}", device=r % 8,
                                    domains={"dp": Domain(group=r % 64, size=ranks // 64, index=r // 64)}, step=s,
                                    start_ns=start, end_ns=start + 500_000_000,
                                    phases=Phases(forward_ms=150.0, backward_ms=300.0, comm_exposed_ms=50.0),
                                    tokens=32768, flops=158e12, peak_flops=989e12))
    writer = BatchingWriter(backend, max_rows=50_000, max_seconds=60.0, max_buffered_rows=200_000)
    t0 = time.perf_counter()
    for offset, event in enumerate(events):
        for row in rows_for(event, T0):
            writer.add_row(row, ("bench.steps", 0, offset))
        if writer.buffered >= 50_000:
            writer.flush()
    writer.flush()
    return len(events), len(events) / (time.perf_counter() - t0)


def queries(ranks: int, steps: int) -> list[tuple[str, FleetQuery | Callable[[Backend], Any]]]:
    hour = TimeRange(T0 + (steps // 2) * 10**9, T0 + (steps // 2 + 3600) * 10**9)
    everything = TimeRange()
    mid = steps // 2

    def timeline(backend: Backend) -> Any:
        return export(backend, Selection(JOB, 0, 15, mid - 5, mid + 5))

    return [
        ("slowest-ranks", fleet.slowest_ranks(JOB, everything, 20)),
        ("slowest-ranks-1h", fleet.slowest_ranks(JOB, hour, 20)),
        ("slowest-hosts", fleet.slowest_hosts(JOB, everything, 20)),
        ("incidents-by-host", fleet.incident_history(host="node-13", limit=100)),
        ("incidents-by-rule", fleet.incident_history(rule="SLOW_STEP", limit=100)),
        ("job-performance", fleet.job_performance(JOB)),
        ("recurrent-offenders", fleet.recurrent_offenders(everything, 2, 20)),
        ("device-hours-lost", fleet.device_hours_lost("", everything)),
        ("device-health", fleet.device_health("", everything, 50)),
        ("throughput-over-time", series_query(JOB, everything)),
        ("step-times", step_times_query(JOB, everything)),
        ("rank-step-heatmap-1h", heat_query(JOB, heat_bins(ranks, max(0, mid - 1800), mid + 1800))),
        ("timeline-16-ranks-11-steps", timeline),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.query", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000_000, help="step rows to load (default 100 M)")
    parser.add_argument("--ranks", type=int, default=10_240)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per query (default 20)")
    parser.add_argument("--ingest-events", type=int, default=100_000, help="events through the real insert path")
    parser.add_argument("--path", type=Path, default=REPO / ".steplens" / "bench-query-chdb")
    parser.add_argument("--keep", action="store_true", help="reuse an already loaded database at --path")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "query.json")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    t_start = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - t_start:7.1f}s] {message}", file=sys.stderr, flush=True)

    steps = max(1, args.rows // args.ranks)
    if not args.keep and args.path.exists():
        shutil.rmtree(args.path)
    backend = EmbeddedBackend(args.path, "steplens")
    try:
        migrate(backend)
        loaded = backend.query("SELECT count() FROM `steplens`.steps WHERE job = %(job)s", {"job": JOB})[0][0]
        extra: dict[str, int] = {}
        load_s = 0.0
        if not loaded:
            log(f"loading {args.ranks:,} ranks x {steps:,} steps = {args.ranks * steps:,} step rows")
            t0 = time.perf_counter()
            loaded = generate_steps(backend, args.ranks, steps, 10_240_000, log)
            extra = generate_other(backend, args.ranks, steps)
            for rollup in ("steps_by_minute", "steps_by_step", "steps_by_rank", "steps_by_day", "host_health",
                           "topology"):
                backend.execute(f"OPTIMIZE TABLE `steplens`.`{rollup}` FINAL")  # steady state: rollups merged
            load_s = time.perf_counter() - t0
            log(f"loaded in {load_s:.0f}s ({loaded / load_s:,.0f} rows/s generated in-engine, rollups included)")
        ingest_ranks = min(args.ranks, 1024)
        ingested, ingest_rate = measured_ingest(backend, ingest_ranks, max(1, args.ingest_events // ingest_ranks))
        log(f"ingest through rows_for + BatchingWriter: {ingested:,} events at {ingest_rate:,.0f} rows/s")
        results: dict[str, dict[str, Any]] = {}
        table: list[tuple[Any, ...]] = []
        for name, query in queries(args.ranks, steps):
            kind = "adhoc" if not isinstance(query, FleetQuery) or query.kind == "adhoc" else "dashboard"
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                rows = query(backend) if not isinstance(query, FleetQuery) else run(backend, query).rows
                times.append(time.perf_counter() - t0)
            times.sort()
            p50 = statistics.median(times)
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            target = DASHBOARD_P95_S if kind == "dashboard" else ADHOC_P95_S
            results[name] = {"kind": kind, "p50_s": round(p50, 4), "p95_s": round(p95, 4), "runs": len(times),
                             "target_p95_s": target, "meets_target": p95 <= target}
            n_rows = len(rows["traceEvents"]) if isinstance(rows, dict) else len(rows)
            table.append((name, kind, f"{p50 * 1e3:.1f}", f"{p95 * 1e3:.1f}", f"{target * 1e3:.0f}",
                          "yes" if p95 <= target else "NO", n_rows))
            log(f"{name}: p50 {p50 * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms")
        disk = sum(f.stat().st_size for f in args.path.rglob("*") if f.is_file())
    finally:
        backend.close()
    result = {
        "rows_loaded": int(loaded), "ingest_rows_per_s": round(ingest_rate), "ingest_rows_measured": ingested,
        "ranks": args.ranks, "steps": steps, "other_rows": extra, "load_s": round(load_s, 1),
        "disk_bytes": disk, "engine": "chdb (embedded)", "queries": results,
        "machine": machine(), "started": started.isoformat(timespec="seconds"), "git": git_commit(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    output.write(sys.stdout, "table", ("query", "kind", "p50_ms", "p95_ms", "target_ms", "ok", "rows"), table)
    print(f"rows loaded {loaded:,}; ingest {ingest_rate:,.0f} rows/s; disk {disk / 2**30:.2f} GiB; -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
