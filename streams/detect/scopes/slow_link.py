"""Slow link: a host's network link that makes every inter-host collective it takes part in slower.

A degraded RDMA link (spec §4: RDMA < 50 % of rated, AllReduce ×2) slows every group that has
a member on that host, and the collective ends together for all members, so no rank of the
group looks slower than its peers (R5 stays quiet) and, when many groups share the host, no
group looks slower than the others (R6 stays quiet). What does change is each group's own
transfer time against its own history:

1. per (collective, group) of a domain that spans hosts, the transfer time of one call is the
   SHORTEST among its members of their longest call (`max_ns`; the mean call without it): the
   late arriver barely waits, so its kernel time is the transfer alone; a group is slowed when
   that is `slow_link_ratio` x its own baseline (median of its last `baseline_steps` unflagged
   steps, after `warmup_steps`);
2. the link is the host all of whose inter-host groups are slowed: its peers on other hosts
   share only some of those groups. One SLOW_LINK finding per such host (`<host>/rdma`).
   A PP partner host may share every one of its inter-host groups with the culprit but its
   own DP groups, which slow mildly with the whole job (a stalled pipeline): of several such
   hosts, those whose least slowed group is under LINK_SHARE of the worst host's least are
   not the link. When too many hosts still qualify (one domain spans hosts only, every host
   looks the same) the scope cannot tell and reports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.columns import DOMAINS
from streams.advice import SCOPES
from streams.detect.scopes.finding import Finding
from streams.detect.windows.comm_columns import comm_columns
from streams.detect.windows.step_frames import Frame, ReportedLayout

ADVICE = SCOPES["SLOW_LINK"]
# of several hosts whose every group slowed, those whose least slowed group is at least this share of the
# most slowed host's least: the others share the culprit's groups and slowed with the job, not as much
LINK_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    warmup_steps: int
    baseline_steps: int
    slow_link_ratio: float
    slow_link_open_after: int
    resolve_after_steps: int


@dataclass(slots=True)
class LinkState:
    history: dict[str, list[float]] = field(default_factory=dict)  # "key|domain|group" -> per-call ms
    seen: int = 0


def _group_times(frame: Frame, topo: ReportedLayout) -> dict[str, tuple[str, int, float]]:
    """Per (collective, domain, group) of a host-spanning domain: the shortest per-call time (ms)."""
    n = min(frame.seen.size, topo.world)
    placed = topo.host_of[:n] >= 0
    best: dict[str, tuple[str, int, float]] = {}
    for key, col in comm_columns(frame).items():
        if col.domain not in DOMAINS:
            continue
        calls = col.calls[:n]
        # one call's transfer time: the longest call when summaries carry it, else the mean call
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(np.isfinite(col.longest_ns[:n]), col.longest_ns[:n], col.total_ns[:n] / calls) / 1e6
        groups = topo.groups[DOMAINS.index(col.domain), :n]
        sel = placed & (groups >= 0) & (calls > 0) & np.isfinite(t)
        if not sel.any():
            continue
        g, t = groups[sel], t[sel]
        order = np.lexsort((t, g))  # by group, then time: each group's first entry is its shortest call
        g, t = g[order], t[order]
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        for gi, ti in zip(g[first].tolist(), t[first].tolist(), strict=True):
            best[f"{key}|{col.domain}|{gi}"] = (col.domain, int(gi), float(ti))
    return best


def evaluate(frame: Frame, topo: ReportedLayout, state: LinkState, params: Params) -> tuple[LinkState, list[Finding]]:
    if not frame.kernels or topo.world == 0:
        return state, []
    state.seen += 1
    times = _group_times(frame, topo)
    slowed: dict[str, float] = {}
    spanning: dict[tuple[str, int], bool] = {}
    for name, (domain, g, t) in times.items():
        members = np.flatnonzero(topo.groups[DOMAINS.index(domain), :topo.world] == g)
        hosts = np.unique(topo.host_of[members])
        spanning[(domain, g)] = hosts.size > 1
        if hosts.size <= 1:
            continue
        hist = state.history.setdefault(name, [])
        if state.seen > params.warmup_steps and len(hist) >= 3:
            ratio = t / float(np.median(hist))
            if ratio >= params.slow_link_ratio:
                slowed[name] = ratio
                continue
        hist.append(t)
        del hist[:-params.baseline_steps]
    if not slowed:
        return state, []
    # per host: how many of its inter-host groups (per collective) are slowed
    total: dict[int, int] = {}
    hit: dict[int, int] = {}
    worst: dict[int, float] = {}
    least: dict[int, float] = {}  # the least slowdown among a host's slowed groups
    for name, (domain, g, _t) in times.items():
        if not spanning.get((domain, g)):
            continue
        members = np.flatnonzero(topo.groups[DOMAINS.index(domain), :topo.world] == g)
        for h in np.unique(topo.host_of[members]).tolist():
            total[h] = total.get(h, 0) + 1
            if name in slowed:
                hit[h] = hit.get(h, 0) + 1
                worst[h] = max(worst.get(h, 0.0), slowed[name])
                least[h] = min(least.get(h, np.inf), slowed[name])
    culprits = [h for h, n in hit.items() if n == total[h] and n >= 2]
    if len(culprits) > 1:  # a peer whose every group also crosses the culprit's link (a PP partner host) and
        # whose own groups slowed only mildly with the job: the link is the one whose every group slowed a lot
        top = max(least[h] for h in culprits)
        culprits = [h for h in culprits if least[h] >= LINK_SHARE * top]
    if not culprits or len(culprits) > max(1, len(topo.hosts) // 8):
        return state, []
    out = []
    for h in culprits:
        host = topo.hosts[h]
        ranks = topo.ranks_of_host(h).tolist()
        out.append(Finding(
            rule="SLOW_LINK", key=f"link:{host}/rdma", scope="link", step=frame.step, host=host, ranks=ranks,
            link=f"{host}/rdma", severity="critical" if worst[h] >= 2.0 else "warning", metric="comm_per_call_ms",
            summary=f"link {host}/rdma: all {hit[h]} inter-host collective groups of {host} slowed, up to "
                    f"{worst[h]:.1f}x their own transfer time; groups without {host} are not",
            observed=worst[h], expected=1.0, threshold=params.slow_link_ratio, unit="x",
            evidence={"groups_slowed": float(hit[h]), "worst_ratio": round(worst[h], 3)}, cause=ADVICE.cause,
            suggestion=ADVICE.suggestion, open_after=params.slow_link_open_after,
            resolve_after=params.resolve_after_steps))
    return state, out
