"""Slow rank of a pair: the late arriver of a 2-member group, judged by its peer's wait.

In a synchronous collective the rank that arrives last runs the shortest kernel and its peer
waits for it; that wait is the peer's exposed communication. With three or more members the
slow-rank scope (`slow_rank.py`) asks whether the late arriver is an outlier of its group;
two members have no majority to be an outlier of (each is as far from their median as the
other), so a pair is judged by what the wait costs, as msprof-analyze's advisor judges a
cluster (a max − min gap above 5 % of the mean step is an issue) and HolisticTraceAnalysis
names the later of two:

- gap = (peer's exposed communication − the rank's own) / the pair's mean step time: the share
  of the step the peer spent waiting for it;
- flagged when gap >= `slow_rank_gap_share` (5 %) AND gap >= 2 x `slow_rank_z` sigmas of the
  pair's own step-to-step noise: the bar `slow_rank.py` sets for a late arriver that Dixon's Q
  cannot confirm, and a pair has no Dixon's Q (healthy simulated pairs, whose noise has a heavy
  tail, pass 3 sigma in ~0.6 % of steps). The noise is read from the successive differences of
  the pair's gap over the last `NOISE_STEPS` steps (median |Δgap| / (0.6745 √2), the current
  step excluded): a pair whose lead changes from step to step (data-dependent work, jitter) has
  a wide one and needs a far larger gap; a rank late by a steady amount has a narrow one and the
  share decides. Successive differences, not the spread around the median, so the onset of a
  straggler (one jump) does not widen the noise and hide it;
- only ranks with no comparable group of >= 3 members: where a majority exists, the outlier
  test of `slow_rank.py` decides;
- no verdict before `warmup_steps` gaps are in the pair's history, or on a step without both
  ranks' exposed communication (no wait figure to judge by).

Persistence is the book's: `slow_rank_min_steps` flagged steps in a row open a SLOW_RANK incident
(the same rule and key as `slow_rank.py`'s, so the two merge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from schemas.columns import DOMAINS
from streams.advice import advise
from streams.detect.scopes.finding import Finding
from streams.detect.scopes.slow_rank import excess_phase, phase_medians
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, ReportedLayout

COMPARABLE = ("dp", "tp", "ep", "cp")  # as slow_rank.py: PP stages differ by design
NOISE_STEPS = 50
NOISE_FLOOR = 1e-3  # a perfectly steady gap (a replayed trace) still has a noise scale
_DIFF_SCALE = 1.0 / (0.6745 * math.sqrt(2.0))  # median |x_t - x_(t-1)| of normal noise -> sigma


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    warmup_steps: int
    slow_rank_gap_share: float
    slow_rank_z: float
    slow_rank_min_steps: int
    resolve_after_steps: int


@dataclass(slots=True)
class PairState:
    """Per pair (domain index, group id): the signed gap of its lower rank over its higher one, newest last."""

    gaps: dict[tuple[int, int], list[float]] = field(default_factory=dict)


def noise(history: list[float]) -> float:
    """The pair's step-to-step noise from successive differences of its gap (NOISE_FLOOR at least)."""
    if len(history) < 2:
        return NOISE_FLOOR
    diffs = np.abs(np.diff(np.asarray(history)))
    return max(float(np.median(diffs)) * _DIFF_SCALE, NOISE_FLOOR)


def _majority_ranks(topo: ReportedLayout) -> np.ndarray:
    """Ranks that belong to a comparable group of >= 3 members (slow_rank.py judges them)."""
    out = np.zeros(topo.world, dtype=bool)
    for d_index, domain in enumerate(DOMAINS):
        if domain in COMPARABLE:
            out |= (topo.groups[d_index] >= 0) & (topo.sizes[d_index] >= 3)
    return out


def evaluate(frame: Frame, topo: ReportedLayout, state: PairState, params: Params) -> tuple[PairState, list[Finding]]:
    world = min(frame.seen.size, topo.world)
    if world < 2:
        return state, []
    majority = _majority_ranks(topo)[:world]
    wait = frame.phases[PHASE_INDEX["comm_exposed_ms"], :world]
    duration = frame.duration_ms[:world]
    out: list[Finding] = []
    for d_index, domain in enumerate(DOMAINS):
        if domain not in COMPARABLE:
            continue
        gid = topo.groups[d_index, :world]
        pairs = (gid >= 0) & (topo.sizes[d_index, :world] == 2) & ~majority
        if not pairs.any():
            continue
        for group in np.unique(gid[pairs]).tolist():
            members = np.flatnonzero(pairs & (gid == group))
            if members.size != 2 or not frame.seen[members].all():
                continue
            a, b = int(members[0]), int(members[1])
            step_ms = float(duration[a] + duration[b]) / 2.0
            if not (np.isfinite(wait[[a, b]]).all() and step_ms > 0):
                continue
            gap = float(wait[b] - wait[a]) / step_ms  # > 0: b waited for a
            history = state.gaps.setdefault((d_index, int(group)), [])
            sigma = noise(history)
            judged = len(history) >= params.warmup_steps
            history.append(gap)
            del history[:-NOISE_STEPS]
            late, peer = (a, b) if gap > 0 else (b, a)
            share = abs(gap)
            if not judged or share < params.slow_rank_gap_share or share < 2 * params.slow_rank_z * sigma:
                continue
            out.append(_finding(frame, topo, domain, int(group), late, peer, share, sigma, step_ms, params))
    return state, out


def _finding(frame: Frame, topo: ReportedLayout, domain: str, group: int, late: int, peer: int, share: float,
             sigma: float, step_ms: float, params: Params) -> Finding:
    wait = frame.phases[PHASE_INDEX["comm_exposed_ms"]]
    host = int(topo.host_of[late]) if late < topo.host_of.size else -1
    host_name = topo.hosts[host] if 0 <= host < len(topo.hosts) else None
    peer_wait, own_wait = float(wait[peer]), float(wait[late])
    phase = excess_phase(frame, [late], phase_medians(frame))
    advice = advise(phase)
    return Finding(
        rule="SLOW_RANK", key=f"rank:{late}", scope="rank", step=frame.step, ranks=[late], host=host_name,
        domain=domain, metric="peer_wait_share", observed=round(share, 4), expected=0.0,
        threshold=params.slow_rank_gap_share, unit="ratio",
        summary=(f"rank {late} ({host_name}) is the one its {domain.upper()} pair waits for: rank {peer} waits "
                 f"{peer_wait - own_wait:.1f} ms more in collectives ({100 * share:.0f} % of the {step_ms:.0f} ms "
                 "step)"),
        evidence={f"wait_gap_share_{domain}": round(share, 4), "peer_wait_ms": round(peer_wait, 3),
                  "own_wait_ms": round(own_wait, 3), "pair_noise": round(sigma, 4), "step_ms": round(step_ms, 3),
                  f"group_{domain}": float(group), "peer": float(peer)},
        severity="critical" if share > 0.3 else "warning", cause_phase=phase, cause=advice.cause,
        suggestion=advice.suggestion,
        open_after=params.slow_rank_min_steps, resolve_after=params.resolve_after_steps,
    )
