"""Slow rank and slow host: the late arrivers their communication groups wait for (Hermes §3).

Per comparable domain (DP, TP, EP, CP; PP stages differ by design and are never compared),
per group with >= 3 reporting ranks, on busy time (step time - exposed communication, so
the slowest rank is the one with the SHORTEST wait):

- the group waited: R_wait = 1 - mean(busy)/max(busy) >= `slow_rank_wait_ratio`;
- the late arriver is an outlier: its robust z >= `slow_rank_z` (3 sigma), with sigma =
  1.4826 x the larger of the group's relative MAD and the job's typical relative deviation
  (median over the last 50 steps), confirmed for groups of n <= 30 by Dixon's Q of the
  largest value above its 99.5 % critical value unless z is twice the threshold, so a
  jittery but healthy job does not turn noise into alarms. Other members past the same z are flagged too
  (two slow ranks of one host can share a group).

A rank its group waits for step after step, under noise too loud for one step or in a group
whose members arrive spread out, is found over a window (`sustained.py`). Groups of two have no
majority to be an outlier of: `slow_pair.py` judges them by the peer's wait.

Ranks flagged in one step are grouped by host: when >= 2 ranks and at least
`slow_host_fraction` of a host's ranks are flagged, that is ONE host finding (a host
problem: thermal, CPU contention, a bad NIC) and its ranks raise no rank findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.columns import DOMAINS, PHASES
from streams.advice import COMPUTE_PHASES, advise
from streams.detect.scopes.confirm import Deviation, compute_share, host_open_after
from streams.detect.scopes.confirm import open_after as graded_open_after
from streams.detect.scopes.finding import Finding
from streams.detect.scopes.outliers import group_stats
from streams.detect.scopes.sustained import WINDOW, StepObservation, SustainedState
from streams.detect.scopes.sustained import update as sustained_update
from streams.detect.windows.step_frames import Frame, ReportedLayout
from streams.dixon import dixon_critical

COMPARABLE = ("dp", "tp", "ep", "cp")
NOISE_STEPS = 50
DEVICE_COMPUTE = (*COMPUTE_PHASES, "optimizer_ms")  # phases without a healthy heavy tail (confirm.py)


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    warmup_steps: int
    slow_rank_wait_ratio: float
    slow_rank_z: float
    slow_rank_gap_share: float
    slow_host_fraction: float
    resolve_after_steps: int
    slow_rank_min_steps: int
    slow_rank_strong_min_steps: int
    slow_rank_strong_z: float
    slow_rank_strong_excess: float
    slow_rank_strong_q_margin: float
    slow_rank_strong_compute_share: float


@dataclass(slots=True)
class SlowRankState:
    noise: float = 0.0  # typical relative deviation of busy time from its group's median
    history: list[float] = field(default_factory=list)  # per step: pooled median relative deviation
    sustained: SustainedState = field(default_factory=SustainedState)


def evaluate(frame: Frame, topo: ReportedLayout, state: SlowRankState, params: Params
             ) -> tuple[SlowRankState, list[Finding]]:
    seen = np.flatnonzero(frame.seen)
    if seen.size < 3:
        return state, []
    busy = frame.busy_ms[seen]
    duration = frame.duration_ms[seen]
    flagged: dict[int, dict[str, float]] = {}
    grading: dict[int, list[tuple[float, float, float, float]]] = {}  # rank -> (z, excess, Q, Q crit) per domain
    noises: list[float] = []
    observed = StepObservation.empty(frame.seen.size)
    for d_index, domain in enumerate(DOMAINS):
        if domain not in COMPARABLE:
            continue
        gid = topo.groups[d_index, seen]
        size = topo.sizes[d_index, seen]
        ok = (gid >= 0) & (size >= 3)
        if not ok.any():
            continue
        ranks = seen[ok]
        values = busy[ok]
        gs = group_stats(gid[ok], values)
        valid = (gs.counts >= 3) & (gs.median > 0)
        if not valid.any():
            continue
        rel_mad = np.where(valid, gs.mad / np.where(gs.median > 0, gs.median, 1.0), np.nan)
        member_valid = np.repeat(valid, gs.counts)
        rel_dev = np.abs(values[gs.order] / np.repeat(gs.median, gs.counts) - 1.0)[member_valid]
        noises.append(float(np.median(rel_dev)))
        noise = max(state.noise, 1e-3)
        sigma = 1.4826 * np.maximum(rel_mad, noise) * gs.median
        wait = 1.0 - gs.mean / np.where(gs.maximum > 0, gs.maximum, 1.0)
        rng = gs.maximum - gs.minimum
        q = np.where(rng > 0, (gs.maximum - gs.second) / np.where(rng > 0, rng, 1.0), 0.0)
        q_crit = dixon_critical(gs.counts)
        z_max = (gs.maximum - gs.median) / np.where(sigma > 0, sigma, np.inf)
        member_group = np.repeat(np.arange(gs.groups.size), gs.counts)
        sorted_vals = values[gs.order]
        is_max = np.zeros(values.size, dtype=bool)
        is_max[gs.starts + gs.counts - 1] = True
        # each member's busy time minus the latest other member's, over the group's mean step: for the latest
        # member, the share of the step its group waits for it alone (sustained.py)
        step_ms = np.add.reduceat(duration[ok][gs.order], gs.starts) / gs.counts
        latest_other = np.where(is_max, np.repeat(gs.second, gs.counts), np.repeat(gs.maximum, gs.counts))
        gap = (sorted_vals - latest_other) / np.repeat(np.where(step_ms > 0, step_ms, np.nan), gs.counts)
        observed.add(d_index, ranks[gs.order][member_valid],
                     (sorted_vals / np.repeat(np.where(gs.median > 0, gs.median, 1.0), gs.counts) - 1.0)[member_valid],
                     is_max[member_valid], np.repeat(gs.median, gs.counts)[member_valid],
                     np.repeat(wait, gs.counts)[member_valid], gap[member_valid])
        waited = valid & (wait >= params.slow_rank_wait_ratio)
        dixon = np.isfinite(q_crit) & (q > q_crit)
        # 3 sigma out of the job's noise, confirmed by Dixon's Q where it applies (n <= 30),
        # unless it is twice that far out (Dixon alone flags 1 in 200 healthy small groups)
        confirmed = dixon | ~np.isfinite(q_crit) | (z_max >= 2 * params.slow_rank_z)
        outlier_group = waited & (z_max >= params.slow_rank_z) & confirmed
        if not outlier_group.any():
            continue
        # members of waiting groups past the z threshold (the maximum always, when its group is an outlier)
        z_member = (sorted_vals - np.repeat(gs.median, gs.counts)) / np.repeat(
            np.where(sigma > 0, sigma, np.inf), gs.counts)
        pick = outlier_group[member_group] & ((z_member >= params.slow_rank_z) | is_max)
        for pos in np.flatnonzero(pick).tolist():
            g = int(member_group[pos])
            rank = int(ranks[gs.order[pos]])
            ev = flagged.setdefault(rank, {})
            ev[f"wait_ratio_{domain}"] = round(float(wait[g]), 4)
            ev[f"z_{domain}"] = round(float(min(z_member[pos], 1e6)), 2)
            ev[f"dixon_q_{domain}"] = round(float(q[g]), 3)
            ev["busy_ms"] = round(float(sorted_vals[pos]), 3)
            ev["group_median_ms"] = max(ev.get("group_median_ms", 0.0), round(float(gs.median[g]), 3))
            ev[f"group_{domain}"] = float(gs.groups[g])
            grading.setdefault(rank, []).append((float(z_member[pos]), float(sorted_vals[pos] / gs.median[g] - 1.0),
                                                 float(q[g]) if is_max[pos] else 0.0, float(q_crit[g])))
    if noises:
        state.history.append(float(np.median(noises)))
        del state.history[:-NOISE_STEPS]
        state.noise = float(np.median(state.history))
    stragglers, excess, gaps = sustained_update(state.sustained, observed, state.noise, params.slow_rank_gap_share)
    for rank, over, gap_share in zip(stragglers.tolist(), excess.tolist(), gaps.tolist(), strict=True):
        if rank in flagged or not frame.seen[rank] or observed.domain[rank] < 0:
            continue
        domain = DOMAINS[int(observed.domain[rank])]
        flagged[rank] = {f"wait_ratio_{domain}": round(float(observed.wait[rank]), 4),
                         "sustained_median_excess": round(over, 4), "sustained_median_gap_share": round(gap_share, 4),
                         "sustained_window": float(WINDOW), "busy_ms": round(float(frame.busy_ms[rank]), 3),
                         "group_median_ms": round(float(observed.median[rank]), 3)}
    if not flagged or len(state.history) <= params.warmup_steps:
        return state, []
    medians = phase_medians(frame)
    return state, _findings(frame, topo, flagged, medians, _deviations(frame, flagged, grading, medians), params)


def phase_medians(frame: Frame) -> dict[int, float]:
    """The job's median per phase (by index into PHASES) over the ranks seen, for the phases any rank
    reported; exposed communication is left out: a late arriver's peers wait, it does not."""
    peers = frame.phases[:, frame.seen]
    return {i: float(np.nanmedian(peers[i])) for i, name in enumerate(PHASES)
            if name != "comm_exposed_ms" and np.isfinite(peers[i]).any()}


def _deviations(frame: Frame, flagged: dict[int, dict[str, float]],
                grading: dict[int, list[tuple[float, float, float, float]]],
                medians: dict[int, float]) -> dict[int, list[Deviation]]:
    """Each flagged rank's evidence for graded confirmation (streams/detect/scopes/confirm.py)."""
    out: dict[int, list[Deviation]] = {}
    for rank in flagged:
        mine = {PHASES[i]: float(frame.phases[i, rank]) - m for i, m in medians.items()
                if np.isfinite(frame.phases[i, rank])}
        share = compute_share(mine, DEVICE_COMPUTE)
        out[rank] = [Deviation(z=z, excess=ex, dixon_q=q, dixon_crit=crit, compute_share=share)
                     for z, ex, q, crit in grading.get(rank, [])]
    return out


def excess_phase(frame: Frame, ranks: list[int], medians: dict[int, float]) -> str | None:
    """The phase in which the flagged ranks exceed the job's median (`phase_medians`) most."""
    excess: dict[str, float] = {}
    for i, median in medians.items():
        mine = frame.phases[i, ranks]
        if np.isfinite(mine).any():
            excess[PHASES[i]] = float(np.nanmean(mine)) - median
    if not excess or max(excess.values()) <= 0:
        return None
    best = max(excess, key=lambda k: excess[k])
    return "forward_ms" if best in COMPUTE_PHASES else best


HOST_SIDE = ("interstep_cpu_ms", "data_ms")  # phases run by the host's CPU: contention shows in every rank
HOST_SIDE_SHARE = 0.03  # of the job's median busy time: what each host peer must spend over the job's median
HOST_SIDE_Z = 6.0       # ... and how many robust sigmas of the job's spread in that phase
HOST_SIDE_PEERS = 0.75  # share of the flagged ranks' host peers that must show it


def _host_side_shared(frame: Frame, members: np.ndarray, flagged: list[int]) -> str | None:
    """The host-side phase (inter-step CPU, data loading) in which most of the flagged ranks' host
    peers run well over the job's median, or None. A slow rank whose host's other ranks all spend
    extra time in the host's own CPU work is the host's problem (a foreign process, CPU contention,
    Hermes' node-0 case), although those peers are not late enough to be flagged themselves: the
    straggler's group waits for it, and data-dependent work hides their few per cent in busy time."""
    peers = np.asarray([r for r in members.tolist() if r not in flagged and r < frame.seen.size and frame.seen[r]])
    if peers.size < 2:
        return None
    seen = np.flatnonzero(frame.seen)
    busy = float(np.median(frame.busy_ms[seen]))
    for name in HOST_SIDE:
        col = frame.phases[PHASES.index(name)]
        job = col[seen]
        job = job[np.isfinite(job)]
        mine = col[peers]
        if job.size < 8 or not np.isfinite(mine).all():
            continue
        median = float(np.median(job))
        sigma = 1.4826 * float(np.median(np.abs(job - median)))
        over = mine - median >= max(HOST_SIDE_SHARE * busy, HOST_SIDE_Z * sigma)
        if over.sum() >= HOST_SIDE_PEERS * peers.size:
            return name
    return None


def _findings(frame: Frame, topo: ReportedLayout, flagged: dict[int, dict[str, float]], medians: dict[int, float],
              devs: dict[int, list[Deviation]], params: Params) -> list[Finding]:
    """`devs`: each rank's evidence for graded confirmation (how many flagged steps it needs to open)."""
    out: list[Finding] = []
    by_host: dict[int, list[int]] = {}
    for rank in flagged:
        by_host.setdefault(int(topo.host_of[rank]), []).append(rank)
    for host, ranks in sorted(by_host.items()):
        members = topo.ranks_of_host(host)
        host_name = topo.hosts[host] if host >= 0 else None
        shared = _host_side_shared(frame, members, ranks) if host >= 0 else None
        if shared is not None or (
                len(ranks) >= 2 and members.size and len(ranks) >= params.slow_host_fraction * members.size):
            ranks.sort()
            phase = shared or excess_phase(frame, ranks, medians)
            advice = advise(phase)
            busy = float(np.mean([flagged[r]["busy_ms"] for r in ranks]))
            median = float(np.mean([flagged[r]["group_median_ms"] for r in ranks]))
            out.append(Finding(
                rule="SLOW_HOST", key=f"host:{host_name}", scope="host", step=frame.step, host=host_name,
                ranks=ranks, metric="busy_ms", observed=busy, expected=median, unit="ms",
                threshold=median * (1 + params.slow_rank_wait_ratio),
                summary=(f"host {host_name}: {len(ranks)} of its {members.size} ranks are the ones their groups "
                         f"wait for, busy {busy:.0f} ms vs group median {median:.0f} ms")
                + (f", and its other ranks spend extra time in {shared.removesuffix('_ms').replace('_', ' ')} "
                   "(the host's own CPU work)" if shared else ""),
                evidence={"ranks_flagged": float(len(ranks)), "ranks_on_host": float(members.size),
                          **({"host_side_shared": 1.0} if shared else {})},
                severity="critical", cause_phase=phase, cause=advice.cause, suggestion=advice.suggestion,
                open_after=host_open_after([devs[r] for r in ranks], params), resolve_after=params.resolve_after_steps,
            ))
            continue
        for rank in ranks:
            ev = flagged[rank]
            phase = excess_phase(frame, [rank], medians)
            advice = advise(phase)
            waits = [v for k, v in ev.items() if k.startswith("wait_ratio_")]
            domains = sorted(k.removeprefix("wait_ratio_") for k in ev if k.startswith("wait_ratio_"))
            several = len(domains) > 1
            groups = f"{', '.join(d.upper() for d in domains)} group{'s' if several else ''}"
            wait = "wait" if several else "waits"  # "its TP group waits for", "its DP, TP groups wait for"
            if "sustained_median_excess" in ev:
                summary = (f"rank {rank} ({host_name}) is the one its {groups} {wait} for, step after step: the "
                           f"slowest in most of the last {WINDOW} steps, busy {100 * ev['sustained_median_excess']:.0f}"
                           f" % over the group median and {100 * ev['sustained_median_gap_share']:.0f} % of the step "
                           "after the next-latest rank (medians over those steps)")
            else:
                summary = (f"rank {rank} ({host_name}) is the one its {groups} {wait} for: busy {ev['busy_ms']:.0f} ms "
                           f"vs group median {ev['group_median_ms']:.0f} ms, R_wait {max(waits):.2f}")
            out.append(Finding(
                rule="SLOW_RANK", key=f"rank:{rank}", scope="rank", step=frame.step, ranks=[rank], host=host_name,
                domain=domains[0], metric="busy_ms", observed=ev["busy_ms"], expected=ev["group_median_ms"],
                threshold=ev["group_median_ms"] * (1 + params.slow_rank_wait_ratio), unit="ms",
                summary=summary,
                evidence=dict(ev), severity="critical" if max(waits) > 0.3 else "warning",
                cause_phase=phase, cause=advice.cause, suggestion=advice.suggestion,
                open_after=graded_open_after(devs[rank], params), resolve_after=params.resolve_after_steps,
            ))
    return out
