"""The data of the capacity report: queries only, no drawing (steplens.report_html draws)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from sinks.backend import Backend
from steplens.queries import fleet
from steplens.queries.base import FleetQuery, Result, TimeRange, run


@dataclass(slots=True)
class ReportData:
    title: str
    job: str
    time_range: TimeRange
    series: list[tuple[Any, ...]] = field(default_factory=list)  # (minute, tokens_per_s, mfu, p50_ms)
    step_times: list[float] = field(default_factory=list)  # the job's step time per step
    heat: list[list[float]] = field(default_factory=list)  # rank bin x step bin: slowness vs the step bin median
    heat_axes: tuple[int, int] = (1, 1)  # ranks per bin, steps per bin
    tables: dict[str, Result] = field(default_factory=dict)


def series_query(job: str, tr: TimeRange) -> FleetQuery:
    sql = (
        "SELECT minute, sumMerge(tokens) / 60. AS tokens_per_s, "
        "if(sumMerge(peak_flop) > 0, sumMerge(flops) / sumMerge(peak_flop), 0.) AS mfu, "
        "quantilesTDigestMerge(0.5, 0.9, 0.99)(step_ms_q)[1] AS p50_ms "
        "FROM {db}.steps_by_minute WHERE (%(job)s = '' OR job = %(job)s) "
        "AND minute >= toStartOfMinute(toDateTime(%(start_s)s)) AND minute < toDateTime(%(end_s)s) "
        "GROUP BY minute ORDER BY minute"
    )
    return FleetQuery("throughput-over-time", "dashboard", sql, {"job": job, **tr.params()},
                      ("minute", "tokens_per_s", "mfu", "p50_ms"))


def step_times_query(job: str, tr: TimeRange) -> FleetQuery:
    sql = (
        "SELECT step, maxMerge(max_ms) AS t FROM {db}.steps_by_step WHERE job = %(job)s "
        "GROUP BY step HAVING minMerge(start_ns) >= %(start_ns)s AND minMerge(start_ns) < %(end_ns)s "
        "ORDER BY step LIMIT 200000"
    )
    return FleetQuery("step-times", "dashboard", sql, {"job": job, **tr.params()}, ("step", "t"))


def heat_query(job: str, step_first: int, step_last: int, rank_bin: int, step_bin: int) -> FleetQuery:
    """Ad hoc: raw step rows of one step range, one sampled step per column (binned: the result stays small).

    The range is in steps, not time: steps are ordered by (job, step, rank), so a step range
    reads only its own granules, and sampling one step per column skips the others' columns.
    Busy time (step − exposed communication), since in a synchronous step every rank's wall
    time is the straggler's: only busy time shows who the others wait for.
    """
    sql = (
        "SELECT intDiv(rank, %(rb)s) AS rbin, intDiv(step, %(sb)s) AS sbin, "
        "avg(duration_ms - ifNull(comm_exposed_ms, 0)) AS ms "
        "FROM {db}.steps WHERE job = %(job)s AND step >= %(s0)s AND step <= %(s1)s AND modulo(step, %(sb)s) = 0 "
        "GROUP BY rbin, sbin"
    )
    return FleetQuery("rank-step-heatmap", "adhoc", sql,
                      {"job": job, "rb": rank_bin, "sb": step_bin, "s0": step_first, "s1": step_last},
                      ("rbin", "sbin", "ms"))


def step_range(backend: Backend, job: str, tr: TimeRange) -> tuple[int, int] | None:
    """The job's first and last step that started in `tr` (from the step rollup)."""
    rows = backend.query(
        f"SELECT min(step), max(step), count() FROM (SELECT step, minMerge(start_ns) AS s0 "
        f"FROM `{backend.database}`.steps_by_step WHERE job = %(job)s GROUP BY step) "
        "WHERE s0 >= %(start_ns)s AND s0 < %(end_ns)s", {"job": job, **tr.params()})
    if not rows or not rows[0][2]:
        return None
    return int(rows[0][0]), int(rows[0][1])


def busiest_job(backend: Backend, tr: TimeRange) -> str:
    rows = backend.query(
        "SELECT job, countMerge(rank_steps) AS n FROM " + f"`{backend.database}`" + ".steps_by_minute "
        "WHERE minute >= toStartOfMinute(toDateTime(%(start_s)s)) AND minute < toDateTime(%(end_s)s) "
        "GROUP BY job ORDER BY n DESC LIMIT 1", tr.params())
    return str(rows[0][0]) if rows else ""


def _heat(rows: list[tuple[Any, ...]]) -> list[list[float]]:
    if not rows:
        return []
    nr = max(int(r[0]) for r in rows) + 1
    s0 = min(int(r[1]) for r in rows)
    ns = max(int(r[1]) for r in rows) - s0 + 1
    grid = [[math.nan] * ns for _ in range(nr)]
    for rbin, sbin, ms in rows:
        grid[int(rbin)][int(sbin) - s0] = float(ms)
    for col in range(ns):
        values = sorted(v for v in (grid[r][col] for r in range(nr)) if not math.isnan(v))
        median = values[len(values) // 2] if values else math.nan
        for r in range(nr):
            grid[r][col] = grid[r][col] / median if median and median > 0 else math.nan
    return grid


def collect(
    backend: Backend, job: str, tr: TimeRange, progress: TextIO | None = sys.stderr,
    clock: Callable[[], float] = time.monotonic,
) -> ReportData:
    """Run every report query, announcing each on `progress` (long scans show where they are)."""
    scope = job or "cluster"
    data = ReportData(title=f"steplens capacity report: {scope}", job=job, time_range=tr)
    steps: list[tuple[str, Callable[[], None]]] = []

    def table(query: FleetQuery) -> Callable[[], None]:
        def go() -> None:
            data.tables[query.name] = run(backend, query)
        return go

    def series() -> None:
        data.series = run(backend, series_query(job, tr)).rows

    focus = job or busiest_job(backend, tr)

    def step_times() -> None:
        data.step_times = [float(r[1]) for r in run(backend, step_times_query(focus, tr)).rows]

    def heat() -> None:
        bounds = backend.query(
            f"SELECT max(rank) + 1 FROM `{backend.database}`.steps_by_rank WHERE job = %(job)s", {"job": focus})
        world = int(bounds[0][0] or 1) if bounds else 1
        steps = step_range(backend, focus, tr)
        if steps is None:
            return
        rb, sb = max(1, math.ceil(world / 48)), max(1, math.ceil((steps[1] - steps[0] + 1) / 120))
        data.heat_axes = (rb, sb)
        data.heat = _heat(run(backend, heat_query(focus, steps[0], steps[1], rb, sb)).rows)

    steps.append(("throughput and MFU over time", series))
    if focus:
        steps.append((f"step times of {focus}", step_times))
        steps.append((f"rank x step heat map of {focus} (scans raw steps)", heat))
        steps.append(("slowest ranks", table(fleet.slowest_ranks(focus, tr, 15))))
        steps.append(("slowest hosts", table(fleet.slowest_hosts(focus, tr, 15))))
        steps.append(("job performance", table(fleet.job_performance(focus))))
    steps.append(("recurrent offenders", table(fleet.recurrent_offenders(tr, 2, 15))))
    steps.append(("incident timeline", table(fleet.incident_history(job=job, time_range=tr, limit=200))))
    steps.append(("device-hours lost", table(fleet.device_hours_lost(job, tr))))
    steps.append(("device health", table(fleet.device_health("", tr, 50))))
    for index, (label, step) in enumerate(steps, 1):
        t0 = clock()
        if progress is not None:
            print(f"[{index}/{len(steps)}] {label} ...", end="", file=progress, flush=True)
        step()
        if progress is not None:
            print(f" {clock() - t0:.2f}s", file=progress, flush=True)
    return data
