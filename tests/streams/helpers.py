"""Small builders for stream-processor tests (no simulator needed)."""

from __future__ import annotations

from schemas import Domain, Phases, StepEvent
from streams.records import DomainStep

T0 = 1_700_000_000_000_000_000


def step_event(rank: int, step: int, busy: float, comm: float = 40.0, world: int = 8, dp_size: int = 8,
               gc: float = 5.0, job: str = "job-a") -> StepEvent:
    """A rank's step whose busy time is `busy` ms and exposed comm `comm` ms."""
    forward = busy - gc - 20.0 - 30.0
    duration_ns = int((busy + comm) * 1e6)
    return StepEvent(
        job=job, rank=rank, world=world, host=f"node-{rank // 8}", device=rank % 8,
        domains={"dp": Domain(group=rank // dp_size, size=dp_size, index=rank % dp_size)},
        step=step, start_ns=T0 + step * 10**9, end_ns=T0 + step * 10**9 + duration_ns,
        phases=Phases(data_ms=20.0, forward_ms=forward, optimizer_ms=30.0, gc_ms=gc, comm_exposed_ms=comm),
    )


def domain_record(rank: int, step: int, busy: float, size: int = 8, group: int = 0, domain: str = "dp",
                  job: str = "job-a", world: int = 8, gc: float = 5.0) -> DomainStep:
    return DomainStep(
        job=job, domain=domain, group=group, size=size, world=world, rank=rank, host=f"node-{rank // 8}",
        step=step, start_ns=T0 + step * 10**9, end_ns=T0 + step * 10**9 + int((busy + 40) * 1e6),
        busy_ms=busy, phases={"forward_ms": busy - gc, "gc_ms": gc, "comm_exposed_ms": 40.0},
    )
