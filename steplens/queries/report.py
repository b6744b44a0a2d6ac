"""The data of the capacity report: queries only, no drawing (steplens.report_html draws)."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from infra.progress import Progress
from sinks.backend import Backend
from steplens.queries import fleet
from steplens.queries.base import FleetQuery, Result, TimeRange, run
from steplens.queries.expected import BREAKDOWN_COLUMNS, JobExpectation, breakdown_rows, job_expectation

SERIES_COLUMNS = ("t0_ns", "t1_ns", "tokens_per_s", "mfu", "p50_ms", "p90_ms", "p99_ms", "step_first", "step_last")


@dataclass(frozen=True, slots=True)
class HeatBins:
    """How the rank x step heat map is binned server-side, so the page stays small at any size.

    Ranks `rank_bin` per row and steps `step_bin` per column keep the grid within the caps
    (512 x 1,000 cells: about 4 MB of JSON, a plotly heat map draws it in a third of a
    second). When world x steps exceeds `max_rows`, only every `stride`-th step of each
    column is read (the chart's title says so): a day of a 10,240-rank job is 885 M rows.
    2 M rows read keeps the query within the 2 s ad hoc target: on this project's 2-core
    machine (embedded chdb, 10,240 ranks x 3,601 steps) 8 M rows took 1.6-2.5 s, 4 M
    0.8-1.2 s, 2 M 0.35-0.45 s.
    """

    world: int
    step_first: int
    steps: int
    rank_bin: int
    step_bin: int
    stride: int

    @property
    def rank_bins(self) -> int:
        return -(-self.world // self.rank_bin)

    @property
    def step_bins(self) -> int:
        return -(-self.steps // self.step_bin)


def heat_bins(world: int, step_first: int, step_last: int, max_rank_bins: int = 512, max_step_bins: int = 1000,
              max_rows: int = 2_000_000) -> HeatBins:
    """The smallest bins that fit the caps; a sampling stride only when the rows read would exceed `max_rows`."""
    world = max(1, world)
    steps = max(1, step_last - step_first + 1)
    rank_bin = max(1, math.ceil(world / max_rank_bins))
    step_bin = max(1, math.ceil(steps / max_step_bins))
    stride = max(1, math.ceil(world * steps / max_rows))
    if stride > 1:  # every column reads the same number of steps: its bin is a whole number of strides
        step_bin = math.ceil(max(step_bin, stride) / stride) * stride
    return HeatBins(world, step_first, steps, rank_bin, step_bin, stride)


@dataclass(slots=True)
class HeatMap:
    """Rank bin (rows) x step bin (columns): each cell's slowest rank, its busy time and that vs the column median.

    `ratio` is the cell's max busy time / the median rank's busy time in that step bin (the
    median of the cells' medians): 1.0 = as fast as the median rank, 1.3 = 30 % slower.
    None where no row landed (a gap, not a zero).
    """

    bins: HeatBins
    ratio: list[list[float | None]]
    max_ms: list[list[float | None]]
    worst: list[list[int | None]]


@dataclass(slots=True)
class ReportData:
    title: str
    job: str
    time_range: TimeRange
    # one row per time bucket, SERIES_COLUMNS; the focus job's steps (<= 1,000 buckets of whole
    # steps) when the report is for a job, the cluster's minutes otherwise
    series: list[tuple[Any, ...]] = field(default_factory=list)
    series_scope: str = ""  # what one bucket is, for the axis titles
    step_times: list[float] = field(default_factory=list)  # the job's step time per step
    heat: HeatMap | None = None
    focus: str = ""  # the job the per-job charts show (the busiest without --job)
    tables: dict[str, Result] = field(default_factory=dict)
    # the focus job's typical step against the newest reference models (its `expectation` None without any)
    expected: JobExpectation | None = None


def _ns(value: Any) -> int:
    if isinstance(value, dt.datetime):
        return int(value.replace(tzinfo=value.tzinfo or dt.UTC).timestamp()) * 1_000_000_000
    return int(value)


def _minute_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out = []
    for minute, tps, mfu, q in rows:
        t0 = _ns(minute)
        out.append((t0, t0 + 60_000_000_000, float(tps), float(mfu), *(float(v) for v in q[:3]), -1, -1))
    return out


def series_query(job: str, tr: TimeRange) -> FleetQuery:
    """Per minute from the minute rollup: the cluster's (or a job's) throughput, MFU and step-time quantiles."""
    sql = (
        "SELECT minute, sumMerge(tokens) / 60. AS tokens_per_s, "
        "if(sumMerge(peak_flop) > 0, sumMerge(flops) / sumMerge(peak_flop), 0.) AS mfu, "
        "quantilesTDigestMerge(0.5, 0.9, 0.99)(step_ms_q) AS q "
        "FROM {db}.steps_by_minute WHERE (%(job)s = '' OR job = %(job)s) "
        "AND minute >= toStartOfMinute(toDateTime(%(start_s)s)) AND minute < toDateTime(%(end_s)s) "
        "GROUP BY minute ORDER BY minute"
    )
    return FleetQuery("throughput-over-time", "dashboard", sql, {"job": job, **tr.params()}, SERIES_COLUMNS,
                      _minute_rows)


def step_series_query(job: str, tr: TimeRange, step_first: int, step_last: int, buckets: int = 1000) -> FleetQuery:
    """One job's series in buckets of whole steps (<= `buckets`) from the step rollup.

    A minute is too coarse for a job of a few minutes (the demo's two points drew one
    diagonal line): a bucket of steps has the resolution the job has. tokens/s = the
    bucket's tokens / its wall time; the quantiles are of the job's step time (its slowest
    rank's) over the bucket's steps.
    """
    per = max(1, math.ceil((step_last - step_first + 1) / buckets))
    sql = (
        "SELECT min(s) AS t0, max(e) AS t1, sum(tok) / greatest((max(e) - min(s)) / 1e9, 1e-9) AS tokens_per_s, "
        "if(sum(pf) > 0, sum(fl) / sum(pf), 0.) AS mfu, quantilesExact(0.5, 0.9, 0.99)(t) AS q, "
        "min(step) AS sf, max(step) AS sl "
        "FROM (SELECT step, minMerge(start_ns) AS s, maxMerge(end_ns) AS e, sumMerge(tokens) AS tok, "
        "sumMerge(flops) AS fl, sumMerge(peak_flop) AS pf, maxMerge(max_ms) AS t "
        "FROM {db}.steps_by_step WHERE job = %(job)s AND step >= %(s0)s AND step <= %(s1)s GROUP BY step "
        "HAVING s >= %(start_ns)s AND s < %(end_ns)s) "
        "GROUP BY intDiv(step - %(s0)s, %(per)s) ORDER BY t0"
    )

    def post(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [(int(t0), int(t1), float(tps), float(mfu), *(float(v) for v in q[:3]), int(a), int(b))
                for t0, t1, tps, mfu, q, a, b in rows]

    return FleetQuery("job-series", "dashboard", sql,
                      {"job": job, "s0": step_first, "s1": step_last, "per": per, **tr.params()}, SERIES_COLUMNS, post)


def step_times_query(job: str, tr: TimeRange) -> FleetQuery:
    sql = (
        "SELECT step, maxMerge(max_ms) AS t FROM {db}.steps_by_step WHERE job = %(job)s "
        "GROUP BY step HAVING minMerge(start_ns) >= %(start_ns)s AND minMerge(start_ns) < %(end_ns)s "
        "ORDER BY step LIMIT 200000"
    )
    return FleetQuery("step-times", "dashboard", sql, {"job": job, **tr.params()}, ("step", "t"))


def heat_query(job: str, bins: HeatBins) -> FleetQuery:
    """Ad hoc: raw step rows of one step range binned in the engine; per cell the slowest rank and the median.

    The range is in steps, not time: steps are ordered by (job, step, rank), so a step range
    reads only its own granules. Busy time (step − exposed communication), since in a
    synchronous step every rank's wall time is the straggler's: only busy time shows who the
    others wait for. Max (not mean) per cell, so one straggler among a bin's ranks shows.
    """
    busy = "duration_ms - ifNull(comm_exposed_ms, 0)"
    sql = (
        f"SELECT intDiv(rank, %(rb)s) AS rbin, intDiv(step - %(s0)s, %(sb)s) AS sbin, max({busy}) AS ms, "
        f"argMax(rank, {busy}) AS worst, quantileExact(0.5)({busy}) AS med "
        "FROM {db}.steps WHERE job = %(job)s AND step >= %(s0)s AND step <= %(s1)s "
        "AND modulo(step - %(s0)s, %(stride)s) = 0 GROUP BY rbin, sbin"
    )
    params = {"job": job, "rb": bins.rank_bin, "sb": bins.step_bin, "stride": bins.stride, "s0": bins.step_first,
              "s1": bins.step_first + bins.steps - 1}
    return FleetQuery("rank-step-heatmap", "adhoc", sql, params, ("rbin", "sbin", "ms", "worst", "med"))


def heat_grid(rows: list[tuple[Any, ...]], bins: HeatBins) -> HeatMap:
    """The query's cells as rows x columns, each cell's max against its column's median (see HeatMap)."""
    nr, nc = bins.rank_bins, bins.step_bins
    max_ms: list[list[float | None]] = [[None] * nc for _ in range(nr)]
    worst: list[list[int | None]] = [[None] * nc for _ in range(nr)]
    medians: list[list[float]] = [[] for _ in range(nc)]
    for rbin, sbin, ms, rank, med in rows:
        r, c = int(rbin), int(sbin)
        if 0 <= r < nr and 0 <= c < nc:
            max_ms[r][c] = float(ms)
            worst[r][c] = int(rank)
            medians[c].append(float(med))
    column = [statistics.median(m) if m else math.nan for m in medians]
    ratio: list[list[float | None]] = [
        [None if v is None or not column[c] > 0 else round(v / column[c], 4) for c, v in enumerate(row)]
        for row in max_ms
    ]
    return HeatMap(bins, ratio, max_ms, worst)


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


def collect(
    backend: Backend, job: str, tr: TimeRange, progress: TextIO | None = sys.stderr, *, tty: bool | None = None,
) -> ReportData:
    """Run every report query, with progress on `progress` (a bar on a terminal, a line per query elsewhere)."""
    scope = job or "cluster"
    data = ReportData(title=f"steplens capacity report: {scope}", job=job, time_range=tr)
    steps: list[tuple[str, Callable[[], None]]] = []

    def table(query: FleetQuery) -> Callable[[], None]:
        def go() -> None:
            data.tables[query.name] = run(backend, query)
        return go

    focus = job or busiest_job(backend, tr)
    data.focus = focus

    def series() -> None:
        span = step_range(backend, job, tr) if job else None
        if span is not None:
            query = step_series_query(job, tr, *span)
            per = max(1, math.ceil((span[1] - span[0] + 1) / 1000))
            data.series_scope = f"job {job}, " + ("per step" if per == 1 else f"per {per} steps")
        else:
            query = series_query(job, tr)
            data.series_scope = (f"job {job}" if job else "cluster") + ", per minute"
        data.series = run(backend, query).rows

    def step_times() -> None:
        data.step_times = [float(r[1]) for r in run(backend, step_times_query(focus, tr)).rows]

    def heat() -> None:
        bounds = backend.query(
            f"SELECT max(rank) + 1 FROM `{backend.database}`.steps_by_rank WHERE job = %(job)s", {"job": focus})
        world = int(bounds[0][0] or 1) if bounds else 1
        span = step_range(backend, focus, tr)
        if span is None:
            return
        bins = heat_bins(world, *span)
        data.heat = heat_grid(run(backend, heat_query(focus, bins)).rows, bins)

    def expected() -> None:
        data.expected = job_expectation(backend, focus, tr)
        if data.expected is not None and data.expected.expectation is not None:
            data.tables["expected-vs-observed"] = Result("expected-vs-observed", BREAKDOWN_COLUMNS,
                                                         breakdown_rows(data.expected))

    steps.append(("throughput and MFU over time", series))
    if focus:
        steps.append((f"step times of {focus}", step_times))
        steps.append((f"rank x step heat map of {focus} (scans raw steps)", heat))
        steps.append(("slowest ranks", table(fleet.slowest_ranks(focus, tr, 15))))
        steps.append(("slowest hosts", table(fleet.slowest_hosts(focus, tr, 15))))
        steps.append(("job performance", table(fleet.job_performance(focus))))
        steps.append(("expected step time (reference models; scans the job's kernel summaries)", expected))
    steps.append(("recurrent offenders", table(fleet.recurrent_offenders(tr, 2, 15))))
    steps.append(("incident timeline", table(fleet.incident_history(job=job, time_range=tr, limit=200))))
    steps.append(("device-hours lost", table(fleet.device_hours_lost(job, tr))))
    steps.append(("device health", table(fleet.device_health("", tr, 50))))
    if progress is None:
        for _, step in steps:
            step()
        return data
    with Progress(len(steps), "report", stream=progress, unit="queries", step_pct=0.0, tty=tty) as bar:
        for label, step in steps:
            bar.note(label)
            step()
            bar.update(1, item=label)
    return data
