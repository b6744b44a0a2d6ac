"""Sustained stragglers: a rank its group waits for step after step, under noise too loud for one step.

The per-step test of `slow_rank` needs 3 robust sigmas (confirmed by Dixon's Q in small
groups). When the whole job is jittery (a loaded host, CPU contention everywhere) a real
straggler, e.g. a rank sharing its core with competing processes, can pass it only in one
step out of three, and an incident needs several consecutive flagged steps. Evidence
accumulates across steps instead: over the last `WINDOW` steps the rank was its group's
slowest member in at least `MAX_SHARE` of them, AND it stands out in the window's median step
in one of two ways:

- its busy excess over the group median is at least `NOISE_MULTIPLE` times the job's typical
  relative deviation (a straggler louder than the job's noise), or
- its group waits for it alone at least `gap_share` of the step (`slow_rank_gap_share`, 5 %:
  mstt's advisor flags a gap above 5 % of the step) in `GAP_STEPS` (9) of the `WINDOW`
  steps: its busy time minus the next-latest member's, over the group's mean step time. In a
  group whose members arrive spread out step after step the typical deviation is the spread
  itself (15 % on a real 8-rank msprof table), so a latest rank 30 % over the median never
  passes 4x it, while the group loses its lead over the next-latest rank to it alone in every
  step;

AND it is the slowest in the current step (so the cause read from this step's phases is its
own, and a fault that already ended, like a GC storm that hit it often, raises nothing afterwards).

For independent noise neither happens by chance: in a group of n the slowest member is any
given rank with probability 1/n per step, so 6 of 10 steps has probability < 2 % even for
n = 4, and the median of 10 excesses above 3 typical deviations is rarer still; both at
once, far below one in a million rank-windows. The gap needs the rank to be the slowest, by
5 % of the step, in 9 of the 10 steps: being the slowest alone has probability < 4e-4 for
n = 3 (the smallest group judged here), and by a margin of 5 % is rarer still.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

WINDOW = 10
MAX_SHARE = 0.6
NOISE_MULTIPLE = 4.0
MIN_EXCESS = 0.05  # a sustained excess below 5 % is not worth an incident, however quiet the job
GAP_STEPS = WINDOW - 1  # steps of the window in which the group must wait for the rank alone (the gap branch)

FloatMatrix = npt.NDArray[np.float64]
BoolMatrix = npt.NDArray[np.bool_]


@dataclass(slots=True)
class SustainedState:
    excess: FloatMatrix = field(default_factory=lambda: np.full((0, WINDOW), np.nan))
    slowest: BoolMatrix = field(default_factory=lambda: np.zeros((0, WINDOW), dtype=bool))
    gap: FloatMatrix = field(default_factory=lambda: np.full((0, WINDOW), np.nan))
    column: int = 0

    def grow(self, world: int) -> None:
        if self.excess.shape[0] < world:
            extra = world - self.excess.shape[0]
            self.excess = np.vstack([self.excess, np.full((extra, WINDOW), np.nan)])
            self.slowest = np.vstack([self.slowest, np.zeros((extra, WINDOW), dtype=bool)])
            self.gap = np.vstack([self.gap, np.full((extra, WINDOW), np.nan)])


@dataclass(slots=True)
class StepObservation:
    """One step's per-rank relative excess over its group median and whether it was the group's slowest."""

    excess: npt.NDArray[np.float64]
    slowest: npt.NDArray[np.bool_]
    gap: npt.NDArray[np.float64]      # busy minus the latest OTHER member's, share of the group's mean step
    median: npt.NDArray[np.float64]   # the group median behind `excess` (evidence)
    wait: npt.NDArray[np.float64]     # that group's R_wait
    domain: npt.NDArray[np.int64]     # index into the domain names of that group, -1 none

    @classmethod
    def empty(cls, world: int) -> StepObservation:
        return cls(np.full(world, np.nan), np.zeros(world, dtype=bool), np.full(world, np.nan),
                   np.full(world, np.nan), np.full(world, np.nan), np.full(world, -1, dtype=np.int64))

    def add(self, domain: int, ranks: npt.NDArray[np.int64], excess: npt.NDArray[np.float64],
            slowest: npt.NDArray[np.bool_], median: npt.NDArray[np.float64], wait: npt.NDArray[np.float64],
            gap: npt.NDArray[np.float64] | None = None) -> None:
        """A domain's members; a rank in several comparable domains keeps its largest excess and its largest gap."""
        current = self.excess[ranks]
        larger = np.isnan(current) | (excess > current)
        take = ranks[larger]
        self.excess[take] = excess[larger]
        self.median[take] = median[larger]
        self.wait[take] = wait[larger]
        self.domain[take] = domain
        self.slowest[ranks] |= slowest
        if gap is not None:
            self.gap[ranks] = np.fmax(self.gap[ranks], gap)


def update(state: SustainedState, obs: StepObservation, noise: float, gap_share: float = np.inf
           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Push one step; the sustained stragglers over the window now ending, their median excess and median gap
    (`gap_share`: the gap that makes one, `slow_rank_gap_share`; infinite: the excess alone decides)."""
    state.grow(obs.excess.size)
    col = state.column % WINDOW
    state.excess[:, col] = np.nan
    state.slowest[:, col] = False
    state.gap[:, col] = np.nan
    state.excess[: obs.excess.size, col] = obs.excess
    state.slowest[: obs.slowest.size, col] = obs.slowest
    state.gap[: obs.gap.size, col] = obs.gap
    state.column += 1
    none = np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    if state.column < WINDOW:
        return none
    full = np.asarray(np.isfinite(state.excess).all(axis=1), dtype=bool)
    if not full.any():
        return none
    share = state.slowest.mean(axis=1)
    median = np.median(np.where(full[:, None], state.excess, 0.0), axis=1)
    gaps = np.where(full[:, None], np.nan_to_num(state.gap, nan=-np.inf), -np.inf)
    gap = np.median(gaps, axis=1)
    threshold = max(NOISE_MULTIPLE * noise, MIN_EXCESS)
    now = state.slowest[:, col] & (state.excess[:, col] >= MIN_EXCESS)  # and it is the straggler in this step
    alone = (gaps >= gap_share).sum(axis=1) >= GAP_STEPS
    hit = full & now & (share >= MAX_SHARE) & ((median >= threshold) | alone)
    ranks = np.flatnonzero(hit).astype(np.int64)
    return ranks, median[ranks], gap[ranks]
