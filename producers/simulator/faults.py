"""Faults the simulator can inject, each recorded in the ground truth a detector is scored against.

A fault changes the per-rank phase times of the steps it covers (see `StepState`); the timing
model in cluster.py then turns those into waits and step durations, so a fault's visible effect
(who waits for whom, which steps are slow) comes out of the same synchronous-training rule as
real clusters. New kinds (thermal throttling, a slow link) subclass `Fault`, implement `apply`
and `describe`, and register in `FAULT_KINDS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PhaseName = Literal["data_ms", "forward_ms", "backward_ms", "optimizer_ms", "gc_ms", "interstep_cpu_ms"]
BUSY_PHASES: tuple[PhaseName, ...] = (
    "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "gc_ms", "interstep_cpu_ms",
)
COMPUTE_PHASES: tuple[PhaseName, ...] = ("forward_ms", "backward_ms", "optimizer_ms")
Effect = Literal["slow_rank", "slow_step"]


@dataclass
class StepState:
    """One step's per-rank quantities while faults are applied (arrays of length world)."""

    step: int
    phases: dict[str, FloatArray]  # the BUSY_PHASES, ms
    gc_count: IntArray
    comm_ms: float  # the step's collective time, the same for every rank


@dataclass(frozen=True, slots=True, kw_only=True)
class InjectedFault:
    """A fault as the ground truth records it: what, where, when, why.

    effect: what a detector should report. "slow_rank": the ranks are slower than their
    domain peers on `steps`. "slow_step": the job's step time rises on `steps`.
    ranks: None means every rank.
    """

    kind: str
    effect: Effect
    cause: str
    ranks: list[int] | None
    steps: list[int]
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "effect": self.effect, "cause": self.cause, "ranks": self.ranks,
                "steps": self.steps, "params": self.params}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InjectedFault:
        ranks = data.get("ranks")
        return cls(kind=str(data["kind"]), effect=data["effect"], cause=str(data["cause"]),
                   ranks=None if ranks is None else [int(r) for r in ranks],
                   steps=[int(s) for s in data["steps"]], params=dict(data.get("params") or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """Base of all fault kinds."""

    kind: ClassVar[str] = "fault"
    cause: str = "unknown"

    def covers(self, step: int) -> bool:
        raise NotImplementedError

    def apply(self, state: StepState) -> None:
        """Change `state` in place for a step this fault covers."""
        raise NotImplementedError

    def describe(self, total_steps: int) -> InjectedFault:
        raise NotImplementedError

    def check(self, world: int) -> None:
        """Raise ValueError when the fault does not fit a job of `world` ranks."""


def _check_ranks(ranks: Iterable[int], world: int) -> None:
    for r in ranks:
        if not 0 <= r < world:
            raise ValueError(f"fault rank {r} outside world of {world}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowRank(Fault):
    """A straggler: forward/backward/optimizer on `rank` take `factor` times longer on steps
    [first_step, last_step] (last_step None: to the end). Every collective then waits for it,
    so it is the rank with the most busy time and the least exposed communication."""

    kind: ClassVar[str] = "slow_rank"
    rank: int
    factor: float
    first_step: int = 0
    last_step: int | None = None
    cause: str = "slow_device"

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ValueError("factor must be > 0")
        if self.first_step < 0 or (self.last_step is not None and self.last_step < self.first_step):
            raise ValueError("need 0 <= first_step <= last_step")

    def covers(self, step: int) -> bool:
        return step >= self.first_step and (self.last_step is None or step <= self.last_step)

    def apply(self, state: StepState) -> None:
        for name in COMPUTE_PHASES:
            state.phases[name][self.rank] *= self.factor

    def check(self, world: int) -> None:
        _check_ranks([self.rank], world)

    def describe(self, total_steps: int) -> InjectedFault:
        last = total_steps - 1 if self.last_step is None else min(self.last_step, total_steps - 1)
        return InjectedFault(kind=self.kind, effect="slow_rank", cause=self.cause, ranks=[self.rank],
                             steps=list(range(self.first_step, last + 1)),
                             params={"factor": self.factor, "phases": list(COMPUTE_PHASES)})


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowSteps(Fault):
    """Extra time in one phase on some steps: a GC pause (`gc_ms`) or a data stall (`data_ms`).

    ranks None: every rank pauses (a job-wide slow step); otherwise only the listed ranks do,
    and the rest of the job waits for them, which makes the step slow all the same.
    """

    kind: ClassVar[str] = "slow_steps"
    steps: tuple[int, ...]
    phase: PhaseName
    extra_ms: float
    ranks: tuple[int, ...] | None = None
    cause: str = "gc_pause"

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(sorted({int(s) for s in self.steps})))
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(sorted({int(r) for r in self.ranks})))
        if self.phase not in BUSY_PHASES:
            raise ValueError(f"phase must be one of {', '.join(BUSY_PHASES)}, got {self.phase!r}")
        if self.extra_ms <= 0:
            raise ValueError("extra_ms must be > 0")
        if any(s < 0 for s in self.steps):
            raise ValueError("steps must be >= 0")

    def covers(self, step: int) -> bool:
        return step in self.steps

    def apply(self, state: StepState) -> None:
        where: slice | list[int] = slice(None) if self.ranks is None else list(self.ranks)
        state.phases[self.phase][where] += self.extra_ms
        if self.phase == "gc_ms":
            state.gc_count[where] += 1

    def check(self, world: int) -> None:
        if self.ranks is not None:
            _check_ranks(self.ranks, world)

    def describe(self, total_steps: int) -> InjectedFault:
        return InjectedFault(kind=self.kind, effect="slow_step", cause=self.cause,
                             ranks=None if self.ranks is None else list(self.ranks),
                             steps=[s for s in self.steps if s < total_steps],
                             params={"phase": self.phase, "extra_ms": self.extra_ms})


def gc_pause(steps: Iterable[int], extra_ms: float, ranks: Iterable[int] | None = None) -> SlowSteps:
    """A Python GC pause of `extra_ms` on `steps` (all ranks, or the listed ones)."""
    return SlowSteps(steps=tuple(steps), phase="gc_ms", extra_ms=extra_ms,
                     ranks=None if ranks is None else tuple(ranks), cause="gc_pause")


def data_stall(steps: Iterable[int], extra_ms: float, ranks: Iterable[int] | None = None) -> SlowSteps:
    """The input pipeline stalls for `extra_ms` on `steps` (DataLoader `__next__` latency)."""
    return SlowSteps(steps=tuple(steps), phase="data_ms", extra_ms=extra_ms,
                     ranks=None if ranks is None else tuple(ranks), cause="data_stall")


FAULT_KINDS: dict[str, type[Fault]] = {SlowRank.kind: SlowRank, SlowSteps.kind: SlowSteps}
