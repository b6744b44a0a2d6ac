"""Sustained stragglers: a rank its group waits for step after step, under noise too loud for one step.

The per-step test of `slow_rank` needs 3 robust sigmas (confirmed by Dixon's Q in small
groups). When the whole job is jittery (a loaded host, CPU contention everywhere) a real
straggler, e.g. a rank sharing its core with competing processes, can pass it only in one
step out of three, and an incident needs several consecutive flagged steps. Evidence
accumulates across steps instead: over the last `WINDOW` steps the rank was its group's
slowest member in at least `MAX_SHARE` of them, its median busy excess over the group
median is at least `NOISE_MULTIPLE` times the job's typical relative deviation, AND it is
the slowest in the current step (so the cause read from this step's phases is its own, and a
fault that already ended, like a GC storm that hit it often, raises nothing afterwards).

For independent noise neither happens by chance: in a group of n the slowest member is any
given rank with probability 1/n per step, so 6 of 10 steps has probability < 2 % even for
n = 4, and the median of 10 excesses above 3 typical deviations is rarer still; both at
once, far below one in a million rank-windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

WINDOW = 10
MAX_SHARE = 0.6
NOISE_MULTIPLE = 4.0
MIN_EXCESS = 0.05  # a sustained excess below 5 % is not worth an incident, however quiet the job

FloatMatrix = npt.NDArray[np.float64]
BoolMatrix = npt.NDArray[np.bool_]


@dataclass(slots=True)
class SustainedState:
    excess: FloatMatrix = field(default_factory=lambda: np.full((0, WINDOW), np.nan))
    slowest: BoolMatrix = field(default_factory=lambda: np.zeros((0, WINDOW), dtype=bool))
    column: int = 0

    def grow(self, world: int) -> None:
        if self.excess.shape[0] < world:
            extra = world - self.excess.shape[0]
            self.excess = np.vstack([self.excess, np.full((extra, WINDOW), np.nan)])
            self.slowest = np.vstack([self.slowest, np.zeros((extra, WINDOW), dtype=bool)])


@dataclass(slots=True)
class StepObservation:
    """One step's per-rank relative excess over its group median and whether it was the group's slowest."""

    excess: npt.NDArray[np.float64]
    slowest: npt.NDArray[np.bool_]
    median: npt.NDArray[np.float64]   # the group median behind `excess` (evidence)
    wait: npt.NDArray[np.float64]     # that group's R_wait
    domain: npt.NDArray[np.int64]     # index into the domain names of that group, -1 none

    @classmethod
    def empty(cls, world: int) -> StepObservation:
        return cls(np.full(world, np.nan), np.zeros(world, dtype=bool), np.full(world, np.nan),
                   np.full(world, np.nan), np.full(world, -1, dtype=np.int64))

    def add(self, domain: int, ranks: npt.NDArray[np.int64], excess: npt.NDArray[np.float64],
            slowest: npt.NDArray[np.bool_], median: npt.NDArray[np.float64], wait: npt.NDArray[np.float64]) -> None:
        """A domain's members; a rank in several comparable domains keeps its largest excess."""
        current = self.excess[ranks]
        larger = np.isnan(current) | (excess > current)
        take = ranks[larger]
        self.excess[take] = excess[larger]
        self.median[take] = median[larger]
        self.wait[take] = wait[larger]
        self.domain[take] = domain
        self.slowest[ranks] |= slowest


def update(state: SustainedState, obs: StepObservation, noise: float
           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Push one step; the sustained stragglers over the window now ending, and their median excess."""
    state.grow(obs.excess.size)
    col = state.column % WINDOW
    state.excess[:, col] = np.nan
    state.slowest[:, col] = False
    state.excess[: obs.excess.size, col] = obs.excess
    state.slowest[: obs.slowest.size, col] = obs.slowest
    state.column += 1
    if state.column < WINDOW:
        return np.empty(0, dtype=np.int64), np.empty(0)
    full = np.asarray(np.isfinite(state.excess).all(axis=1), dtype=bool)
    if not full.any():
        return np.empty(0, dtype=np.int64), np.empty(0)
    share = state.slowest.mean(axis=1)
    median = np.median(np.where(full[:, None], state.excess, 0.0), axis=1)
    threshold = max(NOISE_MULTIPLE * noise, MIN_EXCESS)
    now = state.slowest[:, col] & (state.excess[:, col] >= MIN_EXCESS)  # and it is the straggler in this step
    hit = full & now & (share >= MAX_SHARE) & (median >= threshold)
    ranks = np.flatnonzero(hit).astype(np.int64)
    return ranks, median[ranks]
