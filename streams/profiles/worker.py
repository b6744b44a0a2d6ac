"""The parse worker's processing, kept pure and picklable: a ProfileReady in, rows + an incident
update out. `analyse_dump` runs in a process pool (CPU-bound parsing never blocks the event loop);
`CommandIndex` remembers which incident each profile_on command serves."""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schemas import ControlCommand, Incident, ProfileReady
from sinks.rows import TableRow
from streams.profiles.analysis.breakdown import kernel_steps
from streams.profiles.analysis.diagnose import diagnose
from streams.profiles.jsonstream import TraceFormatError
from streams.profiles.loader import discover, load
from streams.profiles.model import KIND_NAMES, ClusterTable, Profile
from streams.profiles.uri import ProfileUriError, resolve_profile_uri

BREAKDOWN_COLUMNS = (
    "job", "rank", "step", "profile_uri", "format", "command_id", "span_us", "compute_us", "communication_us",
    "overlapped_us", "communication_not_overlapped_us", "memory_not_overlapped_us", "free_us", "preparing_us",
    "parsed_ns", "event_date",
)
KERNEL_COLUMNS = ("job", "rank", "step", "name", "kind", "stream", "start_us", "dur_us", "profile_uri", "event_date")
_FORMATS = {"kineto": "kineto", "ascend_pt": "ascend_pt", "msprof": "msprof"}


class DumpError(Exception):
    """A dump that cannot be used; `field` names what was wrong (uri, format, content)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)  # both in args: the error crosses the process pool by pickle
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


@dataclass(slots=True)
class DumpResult:
    rows: list[TableRow] = field(default_factory=list)
    cause: str | None = None
    suggestion: str | None = None
    summary: str = ""
    evidence: dict[str, float] = field(default_factory=dict)
    findings: int = 0


def analyse_dump(event: ProfileReady, roots: tuple[Path, ...], now_ns: int, max_kernel_rows: int = 2_000_000
                 ) -> DumpResult:
    """Parse and diagnose one dump (runs in a pool process). Raises DumpError on bad input."""
    try:
        path = resolve_profile_uri(event.uri, roots)
    except ProfileUriError as exc:
        raise DumpError("uri", str(exc)) from exc
    if not path.exists():
        raise DumpError("uri", f"{event.uri}: the dump does not exist")
    try:
        items = [(fmt, p) for fmt, p in discover(path)]
        if not items:
            raise DumpError("uri", f"{event.uri}: no {event.format} dump found there")
        loaded = [load(fmt, p) for fmt, p in items]
    except TraceFormatError as exc:
        raise DumpError("content", str(exc)) from exc
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise DumpError("content", f"{event.uri}: {type(exc).__name__}: {exc}") from exc
    profiles = [p for p in loaded if isinstance(p, Profile)]
    clusters = [c for c in loaded if isinstance(c, ClusterTable)]
    if len(profiles) == 1:
        profiles[0].rank = event.rank  # the event's rank is the job's; the dump's own id may be local
    for p in profiles:
        if p.rank is None:
            p.rank = event.rank
    diag = diagnose(profiles, clusters)
    result = DumpResult()
    date = dt.datetime.fromtimestamp(now_ns / 1e9, dt.UTC).date()
    for r in diag.ranks:
        p = r.profile
        rank = p.rank if p.rank is not None else event.rank
        for b in r.steps:
            result.rows.append(TableRow("profile_breakdowns", BREAKDOWN_COLUMNS, (
                event.job, rank, b.step, event.uri, p.format, event.command_id, b.span, b.compute, b.communication,
                b.overlapped, b.communication_not_overlapped, b.memory_not_overlapped, b.free, b.preparing, now_ns,
                date)))
        result.rows.extend(_kernel_rows(event, p, rank, date, max_kernel_rows))
    findings = diag.findings()
    result.findings = len(findings)
    steps = [b for r in diag.ranks for b in r.steps]
    if steps:
        span = sum(b.span for b in steps)
        result.evidence.update({
            "steps": float(len(steps)), "compute_share": sum(b.compute for b in steps) / span if span else 0.0,
            "comm_not_overlapped_share": sum(b.communication_not_overlapped for b in steps) / span if span else 0.0,
            "free_share": sum(b.free for b in steps) / span if span else 0.0,
        })
    top = diag.top()
    if top is None:
        result.summary = f"profile of rank {event.rank} steps {event.step_first}-{event.step_last}: nothing abnormal"
    else:
        result.cause = top.advice.cause
        result.suggestion = top.advice.suggestion
        result.summary = f"profile of rank {event.rank}: {top.summary} (evidence: {top.evidence_text()})"
        result.evidence.update({f"top_{k}": v for k, v in top.evidence.items()})
    return result


def _kernel_rows(event: ProfileReady, p: Profile, rank: int, date: dt.date, limit: int) -> list[TableRow]:
    k = p.kernels
    n = min(len(k), limit)
    if n == 0:
        return []
    steps = kernel_steps(p)
    numbers = np.array([s.number for s in p.steps] + [-1], dtype=np.int64)  # index -1 -> last entry (-1)
    step_no = numbers[steps[:n]].tolist()
    names = p.names.items
    return [TableRow("profile_kernels", KERNEL_COLUMNS, (
        event.job, rank, step_no[i], names[int(k.name[i])], KIND_NAMES[int(k.kind[i])], int(k.stream[i]),
        float(k.ts[i]), float(k.dur[i]), event.uri, date)) for i in range(n)]


class CommandIndex:
    """command_id -> the control command (hence its incident), bounded (oldest forgotten first)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, ControlCommand] = OrderedDict()

    def add(self, command: ControlCommand) -> None:
        self._items[command.command_id] = command
        self._items.move_to_end(command.command_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, command_id: str | None) -> ControlCommand | None:
        return self._items.get(command_id) if command_id else None


def diagnosis_incident(event: ProfileReady, command: ControlCommand | None, result: DumpResult | None,
                       error: DumpError | None, now_ns: int) -> Incident:
    """The incident update that carries the diagnosis (or the failure) back to the incident that asked."""
    incident_id = (command.incident_id if command is not None and command.incident_id
                   else f"diagnosis-{event.job}-{event.rank}-{event.step_first}")
    common = dict(incident_id=incident_id, job=event.job, rule="DIAGNOSIS", rules=["DIAGNOSIS"], scope="rank",
                  ranks=[event.rank], host=event.host, step_first=event.step_first, step_last=event.step_last,
                  detected_ns=now_ns)
    state = "update" if command is not None and command.incident_id else "open"
    if error is not None:
        return Incident(**common, state=state, severity="warning",  # type: ignore[arg-type]
                        summary=f"profile {event.uri} could not be analysed: {error}",
                        cause="profile unusable", suggestion="check the profiler output on the rank and re-run "
                        "profile_on", evidence={})
    assert result is not None
    return Incident(**common, state=state, severity="warning" if result.cause else "info",  # type: ignore[arg-type]
                    summary=result.summary, cause=result.cause, suggestion=result.suggestion,
                    evidence=result.evidence)
