"""One training step as the training thread records it, and the StepEvent built from it off that thread.

Why apart: the training thread must write as little as it can per step (raw perf_counter times,
(phase, ms) pairs appended to a list); turning that into a contract event (summing phases, the
interstep gap, GC, totals) is the builder thread's work (producers/hook/builder.py). This module
is the hand-over between the two: the open step, the finished step, and the event it becomes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from producers.hook.identity import RankInfo
from schemas import Phases, StepEvent

# the contract's phases a rank times itself, without their unit; `interstep_cpu` is the gap between two steps,
# measured from their boundaries, not a timer
TIMED_PHASES = tuple(name.removesuffix("_ms") for name in Phases.NAMES if name != "interstep_cpu_ms")


class StepState:
    """The open step, as little as the training thread must write: raw times and appended records.

    Phase durations are appended as (name, ms) and kernel/collective records as raw tuples; the
    builder thread sums and aggregates them (dicts, dataclasses and maths cost the training thread).
    """

    __slots__ = ("interstep_ns", "kernels", "open_phases", "phases", "start_ns", "step", "t0")

    def __init__(self, step: int, start_ns: int, t0: int, interstep_ns: int | None) -> None:
        self.step = step
        self.start_ns = start_ns
        self.t0 = t0  # perf_counter_ns at begin
        self.interstep_ns = interstep_ns
        self.phases: list[tuple[str, float]] = []
        self.open_phases: dict[str, int] = {}
        self.kernels: list[tuple[Any, ...]] = []


@dataclass(slots=True)
class DoneStep:
    """What the training thread hands over at step end (numbers only, no event building)."""

    state: StepState
    end_ns: int
    samples: int | None
    tokens: int | None
    batch_size: int | None
    flops: float | None
    gc_ms: float | None
    gc_count: int | None
    profiling: bool
    rank: RankInfo
    mem_peak: int | None = None  # the allocator's peak during the step (contract 1.5), None: no device
    mem_reserved: int | None = None  # its reserved bytes at the step's end
    mem_capacity: int | None = None  # the device's memory capacity


def phase_totals(cur: StepState) -> dict[str, float]:
    """Each phase's appended durations summed (ms)."""
    ph: dict[str, float] = {}
    for name, ms in cur.phases:
        ph[name] = ph.get(name, 0.0) + ms
    return ph


def step_event(d: DoneStep, ph: dict[str, float], peak_flops: float | None) -> StepEvent:
    """The finished step's StepEvent, given its `phase_totals`."""
    cur, r = d.state, d.rank
    return StepEvent(
        job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device, domains=r.domains,
        step=cur.step, start_ns=cur.start_ns, end_ns=d.end_ns,
        phases=Phases(
            data_ms=ph.get("data"), forward_ms=ph.get("forward"), backward_ms=ph.get("backward"),
            grad_ms=ph.get("grad"), optimizer_ms=ph.get("optimizer"), comm_exposed_ms=ph.get("comm_exposed"),
            interstep_cpu_ms=None if cur.interstep_ns is None else cur.interstep_ns / 1e6, gc_ms=d.gc_ms,
        ),
        gc_count=d.gc_count, batch_size=d.batch_size, samples=d.samples, tokens=d.tokens, flops=d.flops,
        peak_flops=peak_flops, profiling=d.profiling, attempt=r.attempt,
        mem_peak_bytes=d.mem_peak, mem_reserved_bytes=d.mem_reserved, mem_capacity_bytes=d.mem_capacity,
    )


__all__ = ["TIMED_PHASES", "DoneStep", "StepState", "phase_totals", "step_event"]
