"""A finding: one scope flagged by one rule in one step, before incidents merge findings."""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.incident import Scope, Severity


@dataclass(slots=True, kw_only=True)
class Finding:
    """What a scope or rule reports for one step.

    key: the scope's identity inside the job ("job", "rank:7", "host:node-3", "group:dp/2",
    "device:node-1/3"); findings with the same key and family merge into one incident.
    family: "perf" (slow) or "hang": a hung rank is not the same problem as a slow one.
    open_after: flagged steps needed before an incident opens (persistence against noise).
    candidate_gap: clean steps a not-yet-open candidate survives between flagged ones (a flapping fault).
    adopts: the key of an open incident this finding's incident takes over when it opens (a job-wide
    slow-step incident that this culprit now explains: the same incident, localised).
    """

    rule: str
    key: str
    scope: Scope
    step: int
    summary: str
    family: str = "perf"
    severity: Severity = "warning"
    metric: str | None = None
    ranks: list[int] = field(default_factory=list)
    host: str | None = None
    device: int | None = None
    domain: str | None = None
    group: int | None = None
    link: str | None = None
    stage: int | None = None
    observed: float | None = None
    expected: float | None = None
    threshold: float | None = None
    unit: str | None = None
    evidence: dict[str, float] = field(default_factory=dict)
    cause_phase: str | None = None
    cause: str | None = None
    suggestion: str | None = None
    open_after: int = 1
    resolve_after: int = 1
    candidate_gap: int = 0
    adopts: str | None = None
    hot_ranks: list[int] = field(default_factory=list)  # a split group's members the others wait for
    since_step: int | None = None  # the step the problem began, when a later frame confirms it (a hang)
