"""Graded confirmation: how many flagged steps a slow rank (or host) needs before it opens.

Persistence is the defence against noise: a marginal straggler (3 robust sigmas, Dixon's Q
just past its 99.5 % critical value) must be flagged `slow_rank_min_steps` steps running
(default 3). At 1 step/s that costs seconds of detection delay even when the deviation is
unmistakable. A deviation far beyond every threshold at once may confirm in
`slow_rank_strong_min_steps` instead (default 2):

- robust z >= `slow_rank_strong_z` (default 10: > 3x the alarm threshold), AND
- relative excess over the group median >= `slow_rank_strong_excess` (default 15 %: big
  enough to matter, and beyond what per-step jitter gives a healthy rank), AND
- where Dixon's Q applies (groups of 3..30), Q is past its 99.5 % critical value by
  `slow_rank_strong_q_margin` (default 0.25) of the remaining way to 1 (Q <= 1 always; a
  fixed margin would be unreachable for n = 3, 4): the late arriver is also well apart from
  the second latest (two ranks slowed together by chance do not qualify), AND
- at least `slow_rank_strong_compute_share` (default 0.8) of its excess over the job's
  per-phase medians lies in device compute (forward, backward, grad, optimizer).

Why the last one: a healthy rank's big one-step excursions are transient host-side events
(a data-loader hiccup, a GC pause: heavy-tailed, tens of ms, independent per rank). They
pass the first three tests as clearly as a real straggler's first steps do (measured in the
bench's healthy runs: z 19-24, excess 16-21 %, Q far past critical) and two in a row on one
rank happen often enough at 1,024 ranks to be false alarms with persistence 2. Compute time
has no such tail: a rank whose kernels run 15 % slower for two steps running is throttled,
contended or broken. An excess in the transient-prone phases keeps the full persistence.

All must hold in the same step; the book still counts consecutive flagged steps
(`Finding.open_after` is read per finding), so persistence is shortened, never skipped.
Setting `slow_rank_strong_min_steps` >= `slow_rank_min_steps` turns the grading off.
Pure: numbers in, a step count out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Grading(Protocol):
    """The settings graded confirmation reads: slow_rank's `Params` holds them (so does `DetectionConfig`)."""

    @property
    def slow_rank_min_steps(self) -> int: ...
    @property
    def slow_rank_strong_min_steps(self) -> int: ...
    @property
    def slow_rank_strong_z(self) -> float: ...
    @property
    def slow_rank_strong_excess(self) -> float: ...
    @property
    def slow_rank_strong_q_margin(self) -> float: ...
    @property
    def slow_rank_strong_compute_share(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Deviation:
    """One flagged rank's evidence in one comparable group (one step)."""

    z: float           # robust z of its busy time within its group
    excess: float      # busy / group median - 1
    dixon_q: float     # Dixon's r10 of the group's largest value
    dixon_crit: float  # its 99.5 % critical value; NaN where Dixon does not apply (n > 30)
    compute_share: float  # share of its positive per-phase excess that is device compute (0..1)


def is_strong(dev: Deviation, params: Grading, dixon: bool = True) -> bool:
    """Far beyond every threshold at once (see the module docstring); `dixon=False`: skip Dixon's test."""
    if not (dev.z >= params.slow_rank_strong_z and dev.excess >= params.slow_rank_strong_excess
            and dev.compute_share >= params.slow_rank_strong_compute_share):
        return False
    if not dixon or math.isnan(dev.dixon_crit):
        return True
    return dev.dixon_q >= dev.dixon_crit + params.slow_rank_strong_q_margin * (1.0 - dev.dixon_crit)


def open_after(devs: list[Deviation], params: Grading) -> int:
    """Flagged steps needed for a rank flagged with this evidence (one entry per domain it was flagged in).

    Strong in any domain is strong: the rank is unmistakably the late arriver of that group.
    No evidence (e.g. a sustained straggler found over a window) gets the full persistence.
    """
    base = params.slow_rank_min_steps
    strong = max(1, min(params.slow_rank_strong_min_steps, base))
    return strong if any(is_strong(d, params) for d in devs) else base


def host_open_after(per_rank: list[list[Deviation]], params: Grading) -> int:
    """A host finding (one entry per flagged rank of the host): strong when at least half its flagged ranks are.

    Dixon's Q is not asked here: a host's ranks are slow together, so in a group holding
    several of them the latest is not apart from the second latest. Several ranks of one
    host far out in compute in the same step is itself the confirmation a lone rank lacks.
    """
    base = params.slow_rank_min_steps
    strong = max(1, min(params.slow_rank_strong_min_steps, base))
    n_strong = sum(any(is_strong(d, params, dixon=False) for d in devs) for devs in per_rank)
    return strong if per_rank and 2 * n_strong >= len(per_rank) else base


def compute_share(excess_by_phase: dict[str, float], compute: tuple[str, ...]) -> float:
    """Share of the positive per-phase excesses that lies in the `compute` phases (0 when none is positive)."""
    positive = {k: v for k, v in excess_by_phase.items() if v > 0}
    total = sum(positive.values())
    return sum(v for k, v in positive.items() if k in compute) / total if total > 0 else 0.0
