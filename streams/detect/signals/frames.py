"""A released frame's rule findings (the step feed, then the kernel feed), and where job-wide rule findings
go after the join."""

from __future__ import annotations

import copy

from streams.detect.scopes.finding import Finding
from streams.detect.signals.kernels import KernelParams, kernel_findings
from streams.detect.signals.shared import SignalState
from streams.detect.signals.steps import StepParams, step_findings
from streams.detect.windows.step_frames import Frame, ReportedLayout


def frame_findings(frame: Frame, topo: ReportedLayout, state: SignalState, steps: StepParams, kernels: KernelParams,
                   timings: dict[str, float]) -> list[Finding]:
    """The step feed's findings on a released frame, then the kernel feed's (when it has kernel summaries)."""
    if not frame.seen.any():
        return []
    out: list[Finding] = []
    out.extend(step_findings(frame, topo, state, steps, timings))
    if frame.kernels:
        out.extend(kernel_findings(frame, topo, state, kernels, timings))
    return out


FOLLOW_RULES = ("R3", "R4", "R7", "R8", "R9", "R10")


def follow_slow_step(findings: list[Finding]) -> list[Finding]:
    """Job-wide rule findings of a step whose slow step was joined to a culprit follow it there.

    R3 on step throughput, a job-wide R4/R7/R8/R9/R10 in the same step describe the same slow
    steps that the join (streams/detect/incidents/join.py) attributed to a slow rank or host: one
    problem, one incident carrying every rule id, not a second job-scope incident beside it.
    Run after the join, which decides where the slow step goes.
    """
    slow = next((f for f in findings if f.rule == "SLOW_STEP" and f.key != "job" and f.family == "perf"), None)
    if slow is None:
        return findings
    for f in findings:
        if f.key == "job" and f.rule in FOLLOW_RULES and f.family == "perf":
            f.key, f.scope, f.ranks, f.host = slow.key, slow.scope, list(slow.ranks), slow.host
            f.open_after = max(f.open_after, slow.open_after)
    return findings


def name_slow_groups(findings: list[Finding]) -> list[Finding]:
    """An R6 finding the join left on its group (not a symptom of a slow link, rank or host) is a
    slow-group incident: it carries the SLOW_GROUP scope id beside R6. Run after the join."""
    extra = []
    for f in findings:
        if f.rule == "R6" and f.scope == "group" and f.key.startswith("group:"):
            g = copy.copy(f)
            g.rule = "SLOW_GROUP"
            g.ranks = list(f.ranks)
            g.evidence = dict(f.evidence)
            extra.append(g)
    return findings + extra
