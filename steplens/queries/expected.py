"""One job's typical step against the fleet's reference models: `steplens perf` and the report read it.

What `streams/model/expected.py` needs, read from ClickHouse for one job over a time range:

- the typical step: medians over the job's newest `MAX_STEPS` steps in the range of its step
  time (the slowest rank's), of the slowest rank's busy time (step - exposed communication) and
  of the ranks' mean host time (data, GC, inter-step CPU);
- its kernels as the job's median rank: per kernel key, medians over steps of the median over
  ranks of count, time, FLOPs and bytes; a collective's transfer time per call is each step's
  least over ranks (the rank that waited least: the transfer alone, as `store.collect_collectives`
  fits the curves on), its median over steps. Aggregated in SQL per key: a few rows per job,
  never the kernel summaries' rows;
- the link class of each parallel domain (a group spanning hosts: "inter", else "intra"), the
  job's device kind (device samples), and the newest reference models (`store.load`).

The slowest rank's busy time with the median rank's kernels swapped for their expected times is
`predict_summary_step` on one rank. The fleet's rank-to-rank spread is not stored with the models,
so the expectation holds none (a healthy job of many ranks runs a few percent above it).
Spelled in the SQL that ClickHouse 18.16 and chdb share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sinks.backend import Backend, qualified
from steplens.queries.base import TimeRange
from streams.model.expected import Expectation, expected_vs_observed
from streams.model.reference import ReferenceModels, link_class_of
from streams.model.step_time import SummaryStep
from streams.model.store import DOMAIN_GROUPS, load

# collectives of these domains run after the step's busy phases (the DP gradient's last buckets, the
# pipeline's sends): the exposed tail; the others (TP, EP, CP) inside the forward and backward phases
TAIL_DOMAINS = ("dp", "pp")
HOST = "ifNull(data_ms, 0) + ifNull(gc_ms, 0) + ifNull(interstep_cpu_ms, 0)"
BUSY = "duration_ms - ifNull(comm_exposed_ms, 0)"
ALL_TIME = TimeRange()
# the typical step is the median of at most this many of the job's newest steps in the range
MAX_STEPS = 200
NO_MODELS = "no reference models: run `steplens model fit`"


@dataclass(frozen=True, slots=True)
class JobExpectation:
    """A job's typical step and, when reference models exist, what they expect of it."""

    job: str
    steps: int
    step_first: int
    step_last: int
    typical: SummaryStep
    models: ReferenceModels | None
    expectation: Expectation | None


def _step_window(backend: Backend, job: str, tr: TimeRange, max_steps: int) -> tuple[int, int] | None:
    """The newest `max_steps` steps of the job that started in `tr` (from the step rollup): a long job's
    medians need no more, and its warm-up steps fall out of them."""
    rows = backend.query(
        "SELECT count(), min(step), max(step) FROM (SELECT step, minMerge(start_ns) AS s0 "
        f"FROM {qualified(backend.database, 'steps_by_step')} WHERE job = %(job)s GROUP BY step) "
        "WHERE s0 >= %(start_ns)s AND s0 < %(end_ns)s", {"job": job, **tr.params()})
    if not rows or not rows[0][0]:
        return None
    first, last = int(rows[0][1]), int(rows[0][2])
    return max(first, last - max_steps + 1), last


def _typical_step(backend: Backend, job: str, s0: int, s1: int) -> tuple[int, int, int, float, float, float] | None:
    steps = qualified(backend.database, "steps")
    rows = backend.query(
        "SELECT count(), min(step), max(step), quantileExact(0.5)(t), quantileExact(0.5)(b), "
        "quantileExact(0.5)(h) FROM ("
        f"SELECT step, max(duration_ms) AS t, max({BUSY}) AS b, avg({HOST}) AS h "
        f"FROM {steps} WHERE job = %(job)s AND step >= %(s0)s AND step <= %(s1)s GROUP BY step)",
        {"job": job, "s0": s0, "s1": s1})
    if not rows or not rows[0][0]:
        return None
    n, first, last, t, b, h = rows[0]
    return int(n), int(first), int(last), float(t), float(b), float(h)


def _link_classes(backend: Backend, job: str) -> dict[str, str]:
    """domain -> "intra" when every group of the domain sits on one host, else "inter" (as the fit reads it)."""
    topo = qualified(backend.database, "topology")
    out: dict[str, str] = {}
    for domain, column in DOMAIN_GROUPS.items():
        rows = backend.query(
            f"SELECT max(hosts) FROM (SELECT {column}, uniqExact(host) AS hosts FROM {topo} FINAL "
            f"WHERE job = %(job)s AND {column} >= 0 GROUP BY {column})", {"job": job})
        if rows and rows[0][0] is not None and int(rows[0][0]) > 0:
            out[domain] = link_class_of(int(rows[0][0]))
    return out


def device_kind(backend: Backend, job: str) -> str:
    rows = backend.query(
        f"SELECT any(device_kind) FROM {qualified(backend.database, 'device_samples')} "
        "WHERE job = %(job)s AND device_kind != ''", {"job": job})
    return str(rows[0][0]) if rows and rows[0][0] else ""


def _kernels(backend: Backend, job: str, s0: int, s1: int) -> list[tuple[object, ...]]:
    ks = qualified(backend.database, "kernel_summaries")
    return backend.query(
        "SELECT key, any(cat), any(op), any(domain), max(g), quantileExact(0.5)(c), quantileExact(0.5)(ns), "
        "quantileExact(0.5)(f), quantileExact(0.5)(b), quantileExact(0.5)(tr) FROM ("
        "SELECT key, step, any(cat) AS cat, any(op) AS op, any(domain) AS domain, max(ifNull(group_size, 0)) AS g, "
        "quantileExact(0.5)(count) AS c, quantileExact(0.5)(total_ns) AS ns, "
        "quantileExact(0.5)(ifNull(flops, 0)) AS f, quantileExact(0.5)(ifNull(bytes, 0)) AS b, "
        "min(total_ns / count) AS tr "
        f"FROM {ks} WHERE job = %(job)s AND step >= %(s0)s AND step <= %(s1)s AND entry >= 0 AND count > 0 "
        "GROUP BY key, step) GROUP BY key ORDER BY key", {"job": job, "s0": s0, "s1": s1})


def typical_step(backend: Backend, job: str, tr: TimeRange = ALL_TIME, max_steps: int = MAX_STEPS,
                 ) -> tuple[SummaryStep, int, int, int] | None:
    """The job's typical step as one rank (see the module's docstring), its step count and range."""
    window = _step_window(backend, job, tr, max_steps)
    head = _typical_step(backend, job, *window) if window is not None else None
    if head is None:
        return None
    n, s0, s1, step_ms, busy_ms, host_ms = head
    links = _link_classes(backend, job)
    rows = _kernels(backend, job, s0, s1)
    key, cat, op, link, size, count, total, flops, nbytes, transfer, in_phase = ([] for _ in range(11))
    for k, c, o, d, g, cnt, ns, f, b, tr_call in rows:
        cnt_f = float(cnt)  # type: ignore[arg-type]
        if cnt_f <= 0:
            continue
        domain = None if d is None else str(d)
        is_comm = str(c) == "comm"
        key.append(str(k))
        cat.append(str(c))
        op.append(None if o is None else str(o))
        link.append(links.get(domain) if is_comm and domain else None)
        size.append(int(g))  # type: ignore[call-overload]
        count.append(cnt_f)
        total.append(float(ns))  # type: ignore[arg-type]
        flops.append(float(f))  # type: ignore[arg-type]
        nbytes.append(float(b))  # type: ignore[arg-type]
        transfer.append(float(tr_call) * cnt_f if is_comm else math.nan)  # type: ignore[arg-type]
        in_phase.append(not (is_comm and domain in TAIL_DOMAINS))
    s = SummaryStep(
        device_kind=device_kind(backend, job), step_ms=step_ms, busy_ms=np.array([busy_ms]),
        host_ms=np.array([host_ms]), rank=np.zeros(len(key), dtype=np.int64), key=key, cat=cat,
        count=np.array(count, dtype=np.float64), total_ns=np.array(total, dtype=np.float64),
        flops=np.array(flops, dtype=np.float64), nbytes=np.array(nbytes, dtype=np.float64), op=op, link=link,
        group_size=np.array(size, dtype=np.int64), in_phase=np.array(in_phase, dtype=bool),
        transfer_ns=np.array(transfer, dtype=np.float64))
    return s, n, s0, s1


def job_expectation(backend: Backend, job: str, tr: TimeRange = ALL_TIME,
                    models: ReferenceModels | None = None, max_steps: int = MAX_STEPS) -> JobExpectation | None:
    """The job's typical step against `models` (default: the newest stored version); None without steps."""
    found = typical_step(backend, job, tr, max_steps)
    if found is None:
        return None
    s, n, s0, s1 = found
    ref = models if models is not None else load(backend)
    exp = expected_vs_observed(s, ref) if ref is not None else None
    return JobExpectation(job, n, s0, s1, s, ref, exp)


BREAKDOWN_COLUMNS = ("component", "observed_ms", "expected_ms", "ratio", "detail", "model_version")


def breakdown_rows(e: JobExpectation) -> list[tuple[object, ...]]:
    """One row per component: observed and expected ms per step, observed / expected, the model version."""
    if e.expectation is None:
        return []
    out: list[tuple[object, ...]] = []
    for p in e.expectation.parts:
        ratio = round(p.ratio, 3) if math.isfinite(p.ratio) else None
        out.append((p.component, round(p.observed_ms, 3), round(p.expected_ms, 3), ratio,
                    p.text if p.modelled else p.text + " [no model]", e.expectation.version))
    return out


EXPECTED_COLUMNS = ("expected_step_ms", "vs_expected")


def with_expected(columns: tuple[str, ...], rows: list[tuple[object, ...]], e: JobExpectation | None
                  ) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """`job_performance`'s rows with the expected step time and observed / expected (None without models)."""
    step = e.expectation.step if e is not None and e.expectation is not None else None
    expected = round(step.expected_ms, 3) if step is not None else None
    ratio = round(step.ratio, 3) if step is not None and math.isfinite(step.ratio) else None
    return columns + EXPECTED_COLUMNS, [(*r, expected, ratio) for r in rows]
