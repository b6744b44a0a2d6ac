"""Slow pipeline stage: one PP stage slower than ITS OWN history while the others are not.

Stages differ by design (embedding, LM head, bubbles), so stages are never compared with
each other directly — that would alarm on every healthy pipeline. Instead each stage's
median busy time is compared with the median of its own last `baseline_steps` values:
stage k is slow when that ratio exceeds 1 + `slow_stage_ratio` AND exceeds the other
stages' typical ratio by the same margin (a job-wide slowdown is a slow step, not a stage).
The median over the stage's ranks keeps a single slow rank out (that is a slow rank). A stage
is slow as a whole: its lower quartile must have grown too (`BROAD_SHARE` of the margin). A stage
of two hosts whose median moved because one host's ranks, half of it, are slow is that host's
problem (a slow host on a 32-rank TP4 PP2 DP4 job raised a SLOW_STAGE beside its SLOW_HOST).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame, ReportedLayout

BROAD_SHARE = 0.5  # the stage's lower quartile over its baseline by this share of `slow_stage_ratio` or more


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    warmup_steps: int
    baseline_steps: int
    slow_stage_ratio: float
    slow_rank_min_steps: int
    resolve_after_steps: int


@dataclass(slots=True)
class StageState:
    history: dict[int, list[float]] = field(default_factory=dict)


def evaluate(frame: Frame, topo: ReportedLayout, state: StageState, params: Params
             ) -> tuple[StageState, list[Finding]]:
    seen = np.flatnonzero(frame.seen)
    stage = topo.stage[seen]
    ok = stage >= 0
    stages = np.unique(stage[ok]).tolist()
    if len(stages) < 2:
        return state, []
    busy = frame.busy_ms[seen]
    of = {k: busy[ok & (stage == k)] for k in stages}
    now = {k: float(np.median(x)) for k, x in of.items()}
    low = {k: float(np.percentile(x, 25)) for k, x in of.items()}
    ratio: dict[int, float] = {}
    broad: dict[int, float] = {}  # the lower quartile over the same baseline: the stage's ranks slow together
    for k, value in now.items():
        hist = state.history.get(k, [])
        if len(hist) > params.warmup_steps:
            base = float(np.median(hist))
            ratio[k] = value / base
            broad[k] = low[k] / base
    out: list[Finding] = []
    flagged: set[int] = set()
    if len(ratio) >= 2:
        for k, r in ratio.items():
            others = float(np.median([v for j, v in ratio.items() if j != k]))
            if (r > 1 + params.slow_stage_ratio and r - others > params.slow_stage_ratio
                    and broad[k] > 1 + BROAD_SHARE * params.slow_stage_ratio):
                flagged.add(k)
                base = now[k] / r
                members = seen[ok & (stage == k)].tolist()
                out.append(Finding(
                    rule="SLOW_STAGE", key=f"stage:{k}", scope="stage", step=frame.step, stage=k,
                    ranks=members, metric="busy_ms", observed=now[k], expected=base,
                    threshold=base * (1 + params.slow_stage_ratio), unit="ms",
                    summary=f"PP stage {k}: median busy {now[k]:.0f} ms, {r:.2f}x its own baseline "
                            f"{base:.0f} ms while the other stages stay at {others:.2f}x",
                    evidence={"ratio": round(r, 4), "others_ratio": round(others, 4)},
                    cause=SCOPES["SLOW_STAGE"].cause, suggestion=SCOPES["SLOW_STAGE"].suggestion,
                    open_after=params.slow_rank_min_steps, resolve_after=params.resolve_after_steps))
    for k, value in now.items():
        if k in flagged:
            continue  # a slow stage's values do not enter its baseline
        hist = state.history.setdefault(k, [])
        hist.append(value)
        del hist[:-params.baseline_steps]
    return state, out
