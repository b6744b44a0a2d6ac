"""Timeline export: a job's ranks and step range as a Chrome trace-event JSON (opens in ui.perfetto.dev).

Layout: one process per rank (pid = rank, named "rank R (host)"); thread 1 carries a slice
per step with one child slice per measured phase, thread 2 the raw kernel records of
profiled steps, one slice each. Incidents and control commands are instant events on the
ranks they name (process-scoped), or on every exported rank when they name none.

Steps report phase durations, not their start times, so phases are laid out back to back
from the step's start in the order of `schemas.Phases.NAMES`; exposed communication and GC
pauses therefore appear as their own blocks even where they interleaved with compute.
`build_trace` is pure (rows in, trace out); `export` runs the queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas import Phases
from sinks.backend import Backend, quote_identifier

STEP_TID = 1
KERNEL_TID = 2


@dataclass(frozen=True, slots=True)
class Selection:
    job: str
    rank_first: int
    rank_last: int
    step_first: int
    step_last: int

    def params(self) -> dict[str, Any]:
        return {"job": self.job, "r0": self.rank_first, "r1": self.rank_last, "s0": self.step_first,
                "s1": self.step_last}


def _us(ns: int, origin: int) -> float:
    return (ns - origin) / 1000.0


def build_trace(
    steps: Sequence[tuple[Any, ...]],
    kernels: Sequence[tuple[Any, ...]] = (),
    incidents: Sequence[tuple[Any, ...]] = (),
    controls: Sequence[tuple[Any, ...]] = (),
) -> dict[str, Any]:
    """Rows -> trace. steps: (rank, host, step, start_ns, end_ns, *phases in Phases.NAMES order);
    kernels: (rank, step, name, cat, start_ns, dur_ns); incidents: (rule, summary, ranks, detected_ns,
    step_first, incident_id); controls: (action, ranks, issued_ns, step_first, command_id)."""
    origin = min((int(r[3]) for r in steps), default=0)
    events: list[dict[str, Any]] = []
    ranks: dict[int, str] = {}
    step_start: dict[tuple[int, int], int] = {}
    for row in steps:
        rank, host, step, start_ns, end_ns = int(row[0]), str(row[1]), int(row[2]), int(row[3]), int(row[4])
        ranks[rank] = host
        step_start[(rank, step)] = start_ns
        events.append({"name": f"step {step}", "cat": "step", "ph": "X", "pid": rank, "tid": STEP_TID,
                       "ts": _us(start_ns, origin), "dur": (end_ns - start_ns) / 1000.0, "args": {"step": step}})
        at = start_ns
        for name, value in zip(Phases.NAMES, row[5:], strict=True):
            if value is None:
                continue
            dur_ns = int(float(value) * 1e6)
            events.append({"name": name.removesuffix("_ms"), "cat": "phase", "ph": "X", "pid": rank,
                           "tid": STEP_TID, "ts": _us(at, origin), "dur": dur_ns / 1000.0,
                           "args": {"step": step, "ms": float(value)}})
            at += dur_ns
    for rank, step, name, cat, start_ns, dur_ns in kernels:
        ranks.setdefault(int(rank), "")
        events.append({"name": str(name), "cat": f"kernel,{cat}", "ph": "X", "pid": int(rank), "tid": KERNEL_TID,
                       "ts": _us(int(start_ns), origin), "dur": int(dur_ns) / 1000.0, "args": {"step": int(step)}})
    exported = sorted(ranks)

    def instants(name: str, cat: str, named: Sequence[int], ns: int, step: int | None, args: dict[str, Any]) -> None:
        for rank in [r for r in named if r in ranks] or exported:
            when = step_start.get((rank, step), ns) if step is not None else ns
            events.append({"name": name, "cat": cat, "ph": "i", "s": "p", "pid": rank, "tid": STEP_TID,
                           "ts": _us(when, origin), "args": args})

    for rule, summary, named, detected_ns, step_first, incident_id in incidents:
        instants(str(rule), "incident", [int(r) for r in named], int(detected_ns),
                 None if step_first is None or step_first < 0 else int(step_first),
                 {"summary": summary, "incident_id": incident_id})
    for action, named, issued_ns, step_first, command_id in controls:
        instants(str(action), "control", [int(r) for r in named], int(issued_ns), int(step_first),
                 {"command_id": command_id})
    for rank in exported:
        host = ranks[rank]
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}" + (f" ({host})" if host else "")}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": STEP_TID, "args": {"name": "steps"}})
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": KERNEL_TID, "args": {"name": "kernels"}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"origin_ns": origin}}


def export(backend: Backend, sel: Selection) -> dict[str, Any]:
    """Query the selection's steps, kernels, incidents and control commands and build the trace."""
    db = quote_identifier(backend.database)
    phases = ", ".join(Phases.NAMES)
    p = sel.params()
    steps = backend.query(
        f"SELECT rank, host, step, start_ns, end_ns, {phases} FROM {db}.steps FINAL "
        "WHERE job = %(job)s AND rank BETWEEN %(r0)s AND %(r1)s AND step BETWEEN %(s0)s AND %(s1)s "
        "ORDER BY rank, step", p)
    kernels = backend.query(
        f"SELECT rank, step, name, cat, start_ns, dur_ns FROM {db}.kernels FINAL "
        "WHERE job = %(job)s AND rank BETWEEN %(r0)s AND %(r1)s AND step BETWEEN %(s0)s AND %(s1)s "
        "ORDER BY rank, step, kernel", p)
    incidents = backend.query(
        f"SELECT rule, summary, ranks, detected_ns, ifNull(step_first, -1), incident_id FROM {db}.incidents FINAL "
        "WHERE job = %(job)s AND ifNull(step_last, %(s0)s) >= %(s0)s AND ifNull(step_first, %(s1)s) <= %(s1)s", p)
    controls = backend.query(
        f"SELECT action, ranks, issued_ns, step_first, command_id FROM {db}.control_commands FINAL "
        "WHERE job = %(job)s AND step_first + step_count > %(s0)s AND step_first <= %(s1)s", p)
    return build_trace(steps, kernels, incidents, controls)
