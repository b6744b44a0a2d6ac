"""Records on steplens' internal topics (domain-steps, group-steps).

They are internal to the workers, so they stay compact: only what the window and the
job analysis need, not the whole StepEvent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from schemas import Phases, StepEvent

# Domains whose ranks do the same work each step, so their times are comparable.
# PP is left out on purpose: pipeline stages carry different layers (embedding, LM head)
# and differ in time by design.
COMPARABLE_DOMAINS = ("dp", "tp", "ep", "cp")
MIN_GROUP_FOR_VERDICT = 3


def busy_ms(event: StepEvent) -> float:
    """Time the rank spent working rather than waiting for its peers.

    The rank the others wait for has the largest busy time and the least exposed comm.
    """
    phases = event.phases
    if phases.comm_exposed_ms is not None:
        return max(0.0, event.duration_ms - phases.comm_exposed_ms)
    return sum(getattr(phases, name) or 0.0 for name in Phases.NAMES if name != "comm_exposed_ms")


@dataclass(frozen=True, slots=True)
class DomainStep:
    """One rank's step, re-keyed to one of its communication groups."""

    job: str
    domain: str
    group: int
    size: int
    world: int
    rank: int
    host: str
    step: int
    start_ns: int
    end_ns: int
    busy_ms: float
    phases: dict[str, float]

    @classmethod
    def from_step(cls, event: StepEvent, domain: str) -> DomainStep:
        dom = event.domains[domain]
        phases = {
            name: value for name in Phases.NAMES if (value := getattr(event.phases, name)) is not None
        }
        return cls(
            job=event.job, domain=domain, group=dom.group, size=dom.size, world=event.world,
            rank=event.rank, host=event.host, step=event.step, start_ns=event.start_ns,
            end_ns=event.end_ns, busy_ms=busy_ms(event), phases=phases,
        )

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def dumps(self) -> bytes:
        return orjson.dumps(self)  # orjson serialises dataclasses natively, no asdict copy

    @classmethod
    def loads(cls, raw: bytes) -> DomainStep:
        return cls(**orjson.loads(raw))


def domain_steps(event: StepEvent) -> list[DomainStep]:
    """The re-keyed copies of a step event: one per comparable domain with >= 2 ranks."""
    return [
        DomainStep.from_step(event, name)
        for name in COMPARABLE_DOMAINS
        if name in event.domains and event.domains[name].size >= 2
    ]


@dataclass(frozen=True, slots=True)
class GroupStep:
    """Summary of one communication group in one step (topic group-steps, keyed by job).

    wait_ratio is Hermes' R_wait = 1 - mean(busy)/max(busy); slowest_z is how many robust
    sigmas (1.4826·MAD) the slowest rank's busy time lies above the group median.
    phase_max / phase_mean: per phase, the max and mean over the group's ranks.
    """

    job: str
    domain: str
    group: int
    size: int
    world: int
    step: int
    reported: int
    missing: int
    start_ns: int
    end_ns: int
    step_ms: float
    busy_max_ms: float
    busy_median_ms: float
    busy_mean_ms: float
    wait_ratio: float
    slowest_rank: int
    slowest_host: str
    slowest_z: float
    flagged: bool
    slowest_excess_phase: str | None
    phase_max: dict[str, float] = field(default_factory=dict)
    phase_mean: dict[str, float] = field(default_factory=dict)

    def dumps(self) -> bytes:
        return orjson.dumps({"kind": "group_step", **asdict(self)})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroupStep:
        data = {k: v for k, v in data.items() if k != "kind"}
        return cls(**data)
