"""What the rules' feeds share: the job's signal state, the findings built from rule alarms and the settings
that place a frame feed's findings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.advice import advise_rule
from streams.detect.rules.base import Alarms
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame, ReportedLayout


@dataclass(slots=True)
class SignalState:
    rules: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)   # "host/device" -> series index
    device_rank: dict[int, int] = field(default_factory=dict)
    pending: list[tuple[int, Finding]] = field(default_factory=list)  # (sample time ns, device finding)
    ticks: dict[int, dict[str, list[Any]]] = field(default_factory=dict)  # device samples per tick, held
    device_tick: dict[str, int] = field(default_factory=dict)  # "host/device" -> newest tick it reported
    released_tick: int = -1  # ticks up to this one were evaluated: later samples of them are late
    late_samples: int = 0


@dataclass(frozen=True, slots=True)
class FindingParams:
    """The settings a frame feed's findings read (its `Params` extend them; infra/settings.py
    `DetectionConfig.params` fills them, by the settings' names)."""

    resolve_after_steps: int
    rule_open_after: int
    slow_host_fraction: float


def rule_finding(rule: str, key: str, scope: str, step: int, summary: str, a: Alarms, i: int, resolve_after: int,
                 **kw: Any) -> Finding:
    advice = advise_rule(rule)
    base = float(a.baseline[i])
    return Finding(rule=rule, key=key, scope=scope, step=step, summary=summary[:300],  # type: ignore[arg-type]
                   observed=float(a.value[i]), expected=base if np.isfinite(base) else None,
                   threshold=float(a.threshold[i]) if np.isfinite(a.threshold[i]) else None,
                   cause=advice.cause, suggestion=advice.suggestion, resolve_after=resolve_after, **kw)


def timed(timings: dict[str, float], rule: str, start: float) -> None:
    timings[rule] = timings.get(rule, 0.0) + time.perf_counter() - start


def grow(state: Any, size: int, attr: str) -> Any:
    """A rule state sized for fewer series (the job grew) restarts; equal size keeps it."""
    return state if state is not None and getattr(state, attr).size == size else None


def rank_findings(rule: str, a: Alarms, topo: ReportedLayout, frame: Frame, params: FindingParams, what: str,
                  metric: str, by_host: bool = True, present: int | None = None) -> list[Finding]:
    """Per-rank alarms; when at least half the world alarms it is one job-scope finding, and when
    at least `slow_host_fraction` of a host's ranks (>= 2) alarm together it is one host-scope
    finding (a host-wide cause such as a CPU hog or a bad PCIe switch is one problem, and it
    joins the host's incident instead of one incident per rank).

    `present`: ranks that had data for this rule in the frame (default: every rank seen). A frame
    released on its timeout under a backlog has the kernel summaries of only some ranks: a job-wide
    R8 on those is still job-wide, not one host finding per host that happened to arrive (the
    per-host R8 incidents beside compile_defect's job incident on the Kafka path)."""
    if len(a) == 0:
        return []
    world = max(int(frame.seen.sum()) if present is None else present, 1)
    if len(a) >= 2 and len(a) >= world / 2:
        i = int(np.argmax(a.value))
        return [rule_finding(rule, "job", "job", frame.step, f"{what} on {len(a)} of {world} ranks (up to "
                             f"{a.value[i]:.3g})", a, i, params.resolve_after_steps, metric=metric,
                             open_after=params.rule_open_after)]
    ranks = a.index.tolist()
    host_ix = [int(topo.host_of[r]) if r < topo.host_of.size else -1 for r in ranks]
    per_host: dict[int, list[int]] = {}
    for i, h in enumerate(host_ix):
        if h >= 0 and by_host:
            per_host.setdefault(h, []).append(i)
    out = []
    whole: set[int] = set()
    for h, rows in per_host.items():
        size = int(np.count_nonzero(topo.host_of[:frame.seen.size] == h))
        if len(rows) < 2 or len(rows) < params.slow_host_fraction * size:
            continue
        whole.update(rows)
        i = max(rows, key=lambda j: float(a.value[j]))
        name = topo.hosts[h]
        out.append(rule_finding(rule, f"host:{name}", "host", frame.step, f"host {name}: {what} on {len(rows)} of its "
                                f"{size} ranks (up to {a.value[i]:.3g}, threshold {a.threshold[i]:.3g})", a, i,
                                params.resolve_after_steps, metric=metric, ranks=sorted(ranks[j] for j in rows),
                                host=name, open_after=params.rule_open_after))
    for i, rank in enumerate(ranks):
        if i in whole:
            continue
        h = host_ix[i]
        host = topo.hosts[h] if h >= 0 else None
        out.append(rule_finding(rule, f"rank:{rank}", "rank", frame.step, f"rank {rank} ({host}): {what} "
                                f"{a.value[i]:.3g} (threshold {a.threshold[i]:.3g})", a, i, params.resolve_after_steps,
                                metric=metric, ranks=[rank], host=host, open_after=params.rule_open_after))
    return out
