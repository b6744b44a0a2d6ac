"""Anomalies and incidents: what the alerts topic carries to downstream consumers.

An incident has a stable `incident_id` and a lifecycle: `open` when first detected,
`update` while it continues (wider step range, new evidence), `resolved` when it stops.
Consumers can key on incident_id; ClickHouse keeps the latest state per id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from schemas.decoding import join, require

Severity = Literal["info", "warning", "critical"]
IncidentState = Literal["open", "update", "resolved"]
Scope = Literal["job", "domain", "group", "rank", "device", "host", "link", "stage"]

# Rule ids: R1–R10 from the spec, plus the Hermes cluster analyses.
RULE_IDS = (
    "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "R10",
    "OOM",  # issue #44: a device whose memory trend reaches its capacity within the forecast horizon
    "SLOW_STEP", "SLOW_RANK",
    # contract 1.1: the fleet-scale scopes
    "SLOW_HOST", "SLOW_GROUP", "SLOW_LINK", "SLOW_STAGE", "HUNG_RANK", "HUNG_HOST", "DIAGNOSIS",
    # contract 1.4: a job whose every rank and device stopped reporting (a crash), one incident
    "JOB_STOPPED",
    "BELOW_EXPECTED",  # issue #44: a job well below the fleet's reference models from its start
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """One anomaly, named by rule id (R1–R10, SLOW_STEP, SLOW_RANK) and metric id (T1, G1, ...).

    observed/expected/threshold carry the figures the verdict rests on, in `unit`;
    evidence holds any further numbers (wait ratio, z-score, per-phase deltas).
    cause and suggestion come from the Hermes advisor table.
    """

    TYPE: ClassVar[str] = "incident"

    incident_id: str
    job: str
    rule: str
    state: IncidentState
    severity: Severity
    scope: Scope
    summary: str
    detected_ns: int
    metric: str | None = None
    domain: str | None = None
    group: int | None = None
    ranks: list[int] = field(default_factory=list)
    host: str | None = None
    device: int | None = None
    step_first: int | None = None
    step_last: int | None = None
    observed: float | None = None
    expected: float | None = None
    threshold: float | None = None
    unit: str | None = None
    evidence: dict[str, float] = field(default_factory=dict)
    cause: str | None = None
    suggestion: str | None = None
    rules: list[str] = field(default_factory=list)
    link: str | None = None
    stage: int | None = None
    attempt: int = 0  # contract 1.4: the job's launch the incident belongs to (a relaunch's are its own)

    def check(self, path: str) -> None:
        require(self.attempt >= 0, join(path, "attempt"), "must be >= 0")
        require(bool(self.incident_id), join(path, "incident_id"), "must not be empty")
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(self.host is None or bool(self.host), join(path, "host"), "must not be empty (leave it out instead)")
        require(self.rule in RULE_IDS, join(path, "rule"), f"must be one of {', '.join(RULE_IDS)}")
        for i, rule in enumerate(self.rules):
            require(rule in RULE_IDS, join(path, f"rules[{i}]"), f"must be one of {', '.join(RULE_IDS)}")
        if self.step_first is not None and self.step_last is not None:
            require(self.step_last >= self.step_first, join(path, "step_last"), "must be >= step_first")
