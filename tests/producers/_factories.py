"""Small event builders shared by the producer tests."""

from __future__ import annotations

from schemas import Phases, StepEvent

START_NS = 1_767_225_600_000_000_000


def step_event(step: int, rank: int = 0, job: str = "job-t", world: int = 8) -> StepEvent:
    """A valid StepEvent whose (rank, step) identifies it."""
    start = START_NS + step * 500_000_000
    return StepEvent(
        job=job, rank=rank, world=world, host=f"node-{rank // 8}", device=rank % 8, step=step,
        start_ns=start, end_ns=start + 450_000_000,
        phases=Phases(data_ms=20.0, forward_ms=120.0, backward_ms=240.0, optimizer_ms=30.0, comm_exposed_ms=40.0),
    )


def step_events(n: int, world: int = 8, job: str = "job-t") -> list[StepEvent]:
    """n events: steps 0.., all ranks of a step before the next step."""
    return [step_event(i // world, i % world, job=job, world=world) for i in range(n)]
