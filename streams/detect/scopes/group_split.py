"""Split group: one communication group whose members diverge, some busy far longer while the rest idle.

MoE expert imbalance (hot experts' FFN longer, cold experts idle) and uneven sharding show as
a group whose members do not work alike: the slow members are what a slow-rank analysis
flags, one rank incident each, but the fault is the group's. A rank, host or link fault slows
some ranks without making their group peers FASTER than usual; a split needs both.

Per comparable domain (DP, TP, EP, CP), per group, each member's busy time less its GC pauses
(random GC pauses make members diverge too, but that is a GC problem) is compared with
the median busy time of the ranks in its own PP stage (stages differ by design): the group is
split when a member is at least `HOT` above that median, another at least `COLD` below it,
and the gap between them is at least `SPREAD` — each also at least `HOT_Z`/`COLD_Z`/`SPREAD_Z`
robust sigmas of the job's rank-to-rank spread this step (1.4826 x MAD of those ratios), so
a jittery job (8 % per-rank noise) needs a divergence far beyond its noise. A group that
contains a smaller split group is not reported (the smallest group holding the divergence is
the one at fault). Persistence (`slow_rank_min_steps` flagged steps) is the book's, as for
slow ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schemas.columns import DOMAINS
from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import PHASE_INDEX, FloatArray, Frame, IntArray, ReportedLayout

COMPARABLE = ("dp", "tp", "ep", "cp")
HOT = 0.10     # a member this much above its stage's median busy time ...
COLD = 0.05    # ... and another this much below it ...
SPREAD = 0.20  # ... at least this far apart (healthy jitter within one group stays well under it)
HOT_Z, COLD_Z, SPREAD_Z = 4.0, 3.0, 7.0  # the same in robust sigmas of the job's spread (a jittery job)


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    slow_rank_min_steps: int
    resolve_after_steps: int


def evaluate(frame: Frame, topo: ReportedLayout, params: Params) -> list[Finding]:
    seen = frame.seen
    if int(seen.sum()) < 4:
        return []
    gc = np.nan_to_num(frame.phases[PHASE_INDEX["gc_ms"]])
    busy = np.maximum(frame.busy_ms - gc, 0.0)  # a GC pause is not the group's work (a GC storm is the job's)
    rel = np.full(seen.size, np.nan)
    stage = topo.stage[: seen.size]
    for k in np.unique(stage).tolist():
        members = seen & (stage == k)
        if members.sum() >= 2:
            med = float(np.median(busy[members]))
            if med > 0:
                rel[members] = busy[members] / med - 1.0
    finite = rel[np.isfinite(rel)]
    if finite.size < 4:
        return []
    sigma = 1.4826 * float(np.median(np.abs(finite - np.median(finite))))
    hot_at, cold_at, spread_at = max(HOT, HOT_Z * sigma), max(COLD, COLD_Z * sigma), max(SPREAD, SPREAD_Z * sigma)
    split: list[tuple[str, int, frozenset[int], float, float]] = []
    for d_index, domain in enumerate(DOMAINS):
        if domain in COMPARABLE:
            split.extend(_split_groups(domain, topo.groups[d_index, : seen.size], rel, hot_at, cold_at, spread_at))
    out: list[Finding] = []
    for domain, g, group, hi, lo in split:
        if any(other < group for _, _, other, _, _ in split):
            continue  # a smaller split group inside this one is the one at fault
        hot = sorted(r for r in group if rel[r] >= hot_at)
        out.append(Finding(
            rule="SLOW_GROUP", key=f"group:{domain}/{g}", scope="group", step=frame.step, domain=domain, group=g,
            ranks=sorted(group), metric="busy_ms", observed=round(1.0 + hi, 4), expected=1.0,
            threshold=round(1.0 + hot_at, 4), unit="x stage median",
            summary=f"{domain.upper()} group {g} split: ranks {hot} busy up to {1 + hi:.2f}x their stage's "
                    f"median while others idle at {1 + lo:.2f}x",
            evidence={"hot_ratio": round(1.0 + hi, 4), "cold_ratio": round(1.0 + lo, 4), "hot_ranks": len(hot)},
            hot_ranks=hot,
            cause=SCOPES["SLOW_GROUP"].cause, suggestion=SCOPES["SLOW_GROUP"].suggestion,
            open_after=params.slow_rank_min_steps, resolve_after=params.resolve_after_steps))
    return out


def _split_groups(domain: str, gid: IntArray, rel: FloatArray, hot_at: float, cold_at: float,
                  spread_at: float) -> list[tuple[str, int, frozenset[int], float, float]]:
    """The groups of one domain (`gid`: each rank's group, -1 none) that are split, in group order: every
    group at once (its members sorted together, max and min per run), not a pass over the ranks per group
    (a 6,400-rank job has ~860 groups: that loop was a third of the engine's CPU in `bench.detect_split`).
    A group with a member that has not reported (NaN) gets no verdict this step."""
    members = np.flatnonzero(gid >= 0)
    if members.size == 0:
        return []
    order = members[np.argsort(gid[members], kind="stable")]  # ranks by group, ascending within a group
    groups = gid[order]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    sizes = np.diff(np.r_[starts, groups.size])
    values = rel[order]
    reported = np.logical_and.reduceat(np.isfinite(values), starts)
    with np.errstate(invalid="ignore"):
        hi, lo = np.maximum.reduceat(values, starts), np.minimum.reduceat(values, starts)
        split = (sizes >= 2) & reported & (hi >= hot_at) & (lo <= -cold_at) & (hi - lo >= spread_at)
    return [(domain, int(groups[starts[j]]), frozenset(order[starts[j]:starts[j] + sizes[j]].tolist()),
             float(hi[j]), float(lo[j])) for j in np.flatnonzero(split).tolist()]
