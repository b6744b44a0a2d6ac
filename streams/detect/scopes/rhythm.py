"""The job's rhythm: periodic work (a checkpoint, an evaluation pass) learned, not alarmed.

Healthy training has step kinds that take longer on a schedule: an evaluation pass every N steps
(forward), a checkpoint every M (a blocking device-to-host copy in inter-step CPU, then, when the
save is asynchronous, a background write that slows the next steps' host-side work by a tenth or
so until it is done). The slow-step scope already lets one long step of such a kind pass; this
module follows the slow runs of those kinds as EPISODES (a run of slow steps of a planned cause,
`gap_steps` clean steps allowed inside) and judges each:

- the aftermath of a planned spike: the steps after an episode's first step, when that step was a
  clear spike (>= `tail_spike_ratio` x the baseline) and they are mild (<= `tail_ratio`), for up
  to `tail_steps` steps: an asynchronous checkpoint's write, a cache refill after an evaluation.
  A lasting slowdown of the same kind outlives the window and is judged as usual; one with no
  spike (a data loader slowed from one step to the next) never gets a window;
- on the rhythm: an episode of a cause whose last three episodes were P >= `min_period` steps apart
  (twice, +-1), starting P steps (+-1) after the last one, is the job's periodic work. It is compared with its own
  past (the median excess of the earlier episodes of that cause that were not themselves too slow):
  within `slower_ratio` x that past it is planned, whatever its length; beyond it, it is a finding
  of its own (a checkpoint whose storage slowed), and it stays out of the past it is judged by.

Everything else is judged as before. Pure: the slow-step scope calls `observe` once per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

Verdict = Literal["none", "normal", "planned", "slower"]
PAST = 8  # episodes of one cause kept: the rhythm's period and its typical excess
# the step kinds of healthy training's planned work: an evaluation step (forward), a checkpoint (inter-step
# CPU), a slow batch (data); the slow-step scope's PLANNED_CAUSES
PLANNED = ("forward_ms", "interstep_cpu_ms", "data_ms")


class Params(Protocol):
    """The settings this module reads (the slow-step scope's `Params` carries them, infra/settings.py)."""

    @property
    def rhythm_gap_steps(self) -> int: ...
    @property
    def rhythm_active_share(self) -> float: ...
    @property
    def rhythm_min_period(self) -> int: ...
    @property
    def rhythm_slower_ratio(self) -> float: ...
    @property
    def rhythm_tail_steps(self) -> int: ...
    @property
    def rhythm_tail_ratio(self) -> float: ...
    @property
    def rhythm_tail_spike_ratio(self) -> float: ...


@dataclass(slots=True)
class Episode:
    start: int
    last: int
    cause: str
    first_ratio: float
    cost: list[float] = field(default_factory=list)  # its excess over the baseline so far, per step since start
    slower: bool = False  # judged slower than its rhythm's past: kept out of the past
    planned: bool = False  # its last step was judged planned work: its quiet steps in between are too

    @property
    def excess_ms(self) -> float:
        return self.cost[-1] if self.cost else 0.0

    def add(self, step: int, excess_ms: float) -> None:
        while len(self.cost) < step - self.start:  # the quiet steps in between cost nothing
            self.cost.append(self.excess_ms)
        self.cost.append(self.excess_ms + max(0.0, excess_ms))
        self.last = step


@dataclass(slots=True)
class RhythmState:
    current: Episode | None = None
    starts: dict[str, list[int]] = field(default_factory=dict)  # per cause: where its episodes began
    past: dict[str, list[list[float]]] = field(default_factory=dict)  # per cause: its normal episodes' costs


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    period: int = 0
    past_excess_ms: float = 0.0
    excess_ms: float = 0.0


def _close(state: RhythmState) -> None:
    ep = state.current
    if ep is None:
        return
    state.current = None
    starts = state.starts.setdefault(ep.cause, [])
    starts.append(ep.start)
    del starts[:-PAST]
    if not ep.slower:
        costs = state.past.setdefault(ep.cause, [])
        costs.append(ep.cost)
        del costs[:-PAST]


def rhythm_of(state: RhythmState, cause: str, start: int, params: Params) -> int:
    """The period an episode of `cause` starting at `start` keeps (0: it is not on a rhythm)."""
    starts = state.starts.get(cause, [])
    if len(starts) < 3:  # two equal spacings: healthy noise's slow steps (a data hiccup) fall at random
        return 0
    period = starts[-1] - starts[-2]
    if (period < params.rhythm_min_period or abs(starts[-2] - starts[-3] - period) > 1
            or abs(start - (starts[-1] + period)) > 1):
        return 0
    return period


CHECKPOINT = "interstep_cpu_ms"  # a checkpoint's step kind: its blocking device-to-host copy between steps


def checkpoint_every(state: RhythmState, min_period: int) -> int:
    """The job's checkpoint period in steps, once its last three checkpoint episodes kept one (+-1); 0 before
    (what a relaunch loses: the work since the last checkpoint, half a period on average)."""
    starts = state.starts.get(CHECKPOINT, [])
    if len(starts) < 3:
        return 0
    period = starts[-1] - starts[-2]
    return period if period >= min_period and abs(starts[-2] - starts[-3] - period) <= 1 else 0


def observe(state: RhythmState, step: int, slow: bool, cause: str | None, grown: dict[str, float],
            step_ms: float, baseline_ms: float, params: Params) -> Judgement:
    """One step of the job: `slow` and its `cause` as the slow-step scope judged them, how much each
    planned kind's phase grew over its history (`grown`, ms), the step's time and the job's baseline.

    A step belongs to the current episode while the episode's kind still carries visible work (its
    phase grown by more than `rhythm_active_share` of the baseline) or the step is slow: an
    asynchronous write's steps are often under the slow bar, yet they are the same periodic work; a
    slow batch in the middle of a checkpoint's write does not end the checkpoint, but a spike of
    another kind (a checkpoint a few steps after a slow batch) begins an episode of its own."""
    ratio = step_ms / baseline_ms if baseline_ms > 0 else 1.0
    if slow and cause not in PLANNED:  # another kind of slowdown: a problem of its own
        _close(state)
        return Judgement("normal")
    ep = state.current
    going = ep is not None and step - ep.last <= params.rhythm_gap_steps + 1
    active = ep is not None and grown.get(ep.cause, 0.0) > params.rhythm_active_share * baseline_ms
    if ep is not None and going and slow and cause != ep.cause and (
            ratio >= params.rhythm_tail_spike_ratio or not active):
        going = False  # work of another kind begins (a checkpoint a few steps after a slow batch)
    if ep is not None and going and (slow or active):
        ep.add(step, step_ms - baseline_ms)
    elif slow:
        _close(state)
        assert cause is not None
        ep = state.current = Episode(start=step, last=step, cause=cause, first_ratio=ratio)
        ep.add(step, step_ms - baseline_ms)
    else:
        if ep is not None and step - ep.last > params.rhythm_gap_steps:
            _close(state)
            return Judgement("none")
        return Judgement("planned" if ep is not None and ep.planned else "none")
    period = rhythm_of(state, ep.cause, ep.start, params)
    past = state.past.get(ep.cause, [])
    if period and past:
        # what the earlier episodes had cost as far into them as this one is now (their whole cost past their end)
        k = len(ep.cost) - 1
        ref = float(np.median([p[min(k, len(p) - 1)] for p in past]))
        # much slower than its past, and by more than a quarter of a step (a tiny episode's doubling is noise)
        if ep.excess_ms > params.rhythm_slower_ratio * ref and ep.excess_ms - ref > 0.25 * baseline_ms:
            ep.slower = True
        ep.planned = not ep.slower
        return Judgement("slower" if ep.slower else "planned", period, ref, ep.excess_ms)
    ep.planned = (step > ep.start and ep.first_ratio >= params.rhythm_tail_spike_ratio
                  and ratio <= params.rhythm_tail_ratio and step - ep.start <= params.rhythm_tail_steps)
    return Judgement("planned", 0, 0.0, ep.excess_ms) if ep.planned else Judgement("normal")
