"""Across ranks (spec §3): the late arriver of each collective and the cluster verdict.

In a synchronous collective every rank leaves together, so the rank that *starts* last and has
the *shortest* kernel is the one the others waited for. Collectives are matched across ranks by
(group, op, sequence number within the group): a communicator runs its collectives in one order
on every rank. A trace that lost events (a sampled Kineto trace, a CUPTI buffer that overflowed)
breaks that order: its n-th is another collective than its peer's n-th, and the pair shows it by
not even overlapping in time (one rank's ended before the other's began). Where the order pairs
any such, and matching by the common end (every rank leaves a synchronous collective at once; the
late arriver's kernel is the shortest, not the last to end) pairs as many that end together, the
ends decide, and collectives that only some ranks' traces hold are left out
(`MatchedCollectives.unmatched`). Ranks on different hosts may read different clocks: the
offset the order's overlapping pairs show is taken out before either test, and clocks too far
apart for any pair to overlap end together nowhere, either way: the order stands.

Pipeline stages are kept apart: only ranks of the same stage are compared, and one-sided
point-to-point transfers (the pipeline's own send/recv, whose waits are bubbles by design) do not
vote. NCCL's SendRecv kernel carries all-to-all and
does vote. A rank whose dump has no collective list (torch_npu level 0 writes no
communication.json) is matched by its communication kernels themselves (`hcom_allReduce__868_0_1`,
`ncclDevKernel_AllReduce_...`): the op from the name, the group from the name's communicator
suffix (HCCL) or the kernel's stream (NCCL runs each communicator on its own stream).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.model import COMMUNICATION, Collective, Profile

P2P_OPS = frozenset(("send", "recv", "receive", "p2p"))  # one-sided transfers (PP); SendRecv is all-to-all
_HCCL_KERNEL = re.compile(r"^hcom_([A-Za-z]+)_+(\d+)?")  # hcom_allReduce__868_0_1: op, communicator suffix
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")  # ncclDevKernel_AllReduce_Sum_f32_RING_LL


@dataclass(frozen=True, slots=True)
class LateArrival:
    key: tuple[str, str, int]
    late_rank: int
    lateness_us: float  # last start − first start
    shortest_rank: int
    first_start_us: float


Matched = dict[tuple[int | None, str, str, int], dict[int, tuple[float, float]]]
END_SLACK_US = 50.0  # ranks leave a synchronous collective together, up to this ...
END_SLACK_SHARE = 0.02  # ... or this share of the shortest kernel (an all-to-all's last receives differ)


@dataclass(frozen=True, slots=True)
class MatchedCollectives:
    """The collectives matched across ranks, and how many one rank's trace held that no peer's matched."""

    matched: Matched
    unmatched: int
    by_end: tuple[tuple[str, str], ...]  # (group, op) matched by their common end, not by order
    alone: dict[int, frozenset[float]] = field(default_factory=dict)  # rank -> starts of its kernels left out


def kernel_collectives(p: Profile) -> list[Collective]:
    """A dump without a collective list: its communication kernels as collectives (op and group from the
    kernel's name, or its stream; sizes unknown). Kernels of no recognisable op are left out."""
    out: list[Collective] = []
    k = p.kernels
    for i in np.flatnonzero(k.kind == COMMUNICATION).tolist():
        name = p.names[int(k.name[i])]
        hccl = _HCCL_KERNEL.match(name)
        nccl = None if hccl else _NCCL_KERNEL.match(name)
        if hccl:
            op, group = hccl.group(1).lower(), f"hcom:{hccl.group(2) or ''}"
        elif nccl:
            op, group = nccl.group(1).lower(), f"stream:{int(k.stream[i])}"
        else:
            continue
        out.append(Collective(name=name, op=op, ts=float(k.ts[i]), dur=float(k.dur[i]), bytes=math.nan, group=group,
                              seq=-1))
    return out


def _end_slack(shortest: float) -> float:
    """How far apart the ends of one collective's kernels may be, the shortest kernel lasting `shortest` µs."""
    return max(END_SLACK_US, END_SLACK_SHARE * shortest)


def _end_together(per_rank: dict[int, tuple[float, float]]) -> bool:
    """The ranks' kernels of one synchronous collective end together (the late arriver's is the shortest):
    their ends within `_end_slack`."""
    ends = [ts + dur for ts, dur in per_rank.values()]
    return max(ends) - min(ends) <= _end_slack(min(dur for _ts, dur in per_rank.values()))


def _apart(per_rank: dict[int, tuple[float, float]]) -> bool:
    """Two of the ranks' kernels do not even overlap in time (the latest start is after the earliest end):
    they cannot be one synchronous collective."""
    return max(ts for ts, _dur in per_rank.values()) > min(ts + dur for ts, dur in per_rank.values()) + END_SLACK_US


def _clock_offsets(per_rank: dict[int, list[tuple[float, float]]],
                   matches: list[dict[int, tuple[float, float]]]) -> dict[int, float]:
    """How far each rank's clock runs ahead of the lowest rank's: the median end difference of the order's
    pairs that overlap (ranks on other hosts; 0 without any). A pair the order got wrong rarely overlaps."""
    ref = min(per_rank)
    out = {ref: 0.0}
    for r in per_rank:
        if r != ref:
            diffs = [(m[r][0] + m[r][1]) - (m[ref][0] + m[ref][1]) for m in matches
                     if r in m and ref in m and not _apart({ref: m[ref], r: m[r]})]
            out[r] = float(np.median(diffs)) if diffs else 0.0
    return out


def _by_order(per_rank: dict[int, list[tuple[float, float]]]) -> list[dict[int, tuple[float, float]]]:
    n = max(len(v) for v in per_rank.values())
    return [{r: v[i] for r, v in per_rank.items() if i < len(v)} for i in range(n)]


def _by_end(per_rank: dict[int, list[tuple[float, float]]]) -> list[dict[int, tuple[float, float]]]:
    """Collectives grouped by their common end: in end order, an instance joins the open group when its
    rank is not in it yet and the group still ends together with it (`_end_together`, kept as it grows)."""
    groups: list[dict[int, tuple[float, float]]] = []
    first_end = shortest = 0.0
    for end, rank, span in sorted((ts + dur, r, (ts, dur)) for r, v in per_rank.items() for ts, dur in v):
        if groups and rank not in groups[-1]:
            short = min(shortest, span[1])
            if end - first_end <= _end_slack(short):
                groups[-1][rank] = span
                shortest = short
                continue
        groups.append({rank: span})
        first_end, shortest = end, span[1]
    return groups


def _fits(matches: list[dict[int, tuple[float, float]]]) -> int:
    return sum(1 for m in matches if len(m) >= 2 and _end_together(m))


def match_collectives(profiles: list[Profile]) -> MatchedCollectives:
    """(stage, group, op, n-th of that op in the group) -> rank -> (start, duration); p2p left out."""
    lists: dict[tuple[int | None, str, str], dict[int, list[tuple[float, float]]]] = {}
    for p in profiles:
        if p.rank is None:
            continue
        for c in sorted(p.collectives or kernel_collectives(p), key=lambda c: c.ts):
            if c.op in P2P_OPS:
                continue
            lists.setdefault((p.stage, c.group, c.op), {}).setdefault(p.rank, []).append((c.ts, c.dur))
    table: Matched = {}
    unmatched = 0
    by_end: list[tuple[str, str]] = []
    alone: dict[int, set[float]] = {}
    for (stage, group, op), per_rank in lists.items():
        matches = _by_order(per_rank)
        if len(per_rank) >= 2:
            offsets = _clock_offsets(per_rank, matches)
            aligned = {r: [(ts - offsets[r], dur) for ts, dur in v] for r, v in per_rank.items()}
            in_order = _by_order(aligned)
            if any(_apart(m) for m in in_order):
                ends = _by_end(aligned)
                if _fits(ends) >= max(_fits(in_order), 1):  # clocks apart (no end agrees): the order stands
                    matches = [{r: (ts + offsets[r], dur) for r, (ts, dur) in m.items()} for m in ends if len(m) >= 2]
                    unmatched += sum(len(v) for v in per_rank.values()) - sum(len(m) for m in matches)
                    by_end.append((group, op))
                    for r, v in per_rank.items():  # aligned starts compared: the same arithmetic, exact
                        kept = {m[r][0] for m in ends if len(m) >= 2 and r in m}
                        alone.setdefault(r, set()).update(
                            raw for raw, (ts, _dur) in zip((t for t, _ in v), aligned[r], strict=True)
                            if ts not in kept)
        for n, m in enumerate(matches):
            table[(stage, group, op, n)] = m
    return MatchedCollectives(table, unmatched, tuple(by_end), {r: frozenset(v) for r, v in alone.items()})


def matched_collectives(profiles: list[Profile]) -> Matched:
    """`match_collectives`' table alone."""
    return match_collectives(profiles).matched


def late_arrivals(matched: Matched) -> list[LateArrival]:
    out: list[LateArrival] = []
    for (_stage, group, op, n), per_rank in matched.items():
        if len(per_rank) < 2:
            continue
        late = max(per_rank, key=lambda r: per_rank[r][0])
        first = min(v[0] for v in per_rank.values())
        if per_rank[late][0] <= first:
            continue  # everyone started together: nobody was waited for
        shortest = min(per_rank, key=lambda r: per_rank[r][1])
        out.append(LateArrival((group, op, n), late, per_rank[late][0] - first, shortest, first))
    return out


def cluster_verdict(profiles: list[Profile], min_share: float = 0.5, min_wait_share: float = 0.01,
                    slow_step_share: float = 0.05) -> list[ProfileFinding]:
    """The rank the others wait for most, when that wait matters.

    Each collective's late arriver (the last to start, and the shortest kernel) counts its lateness: the
    rank with at least `min_share` of the summed lateness is the one waited for. Counted by collectives
    instead, a collective's own jitter decided: on a torch_npu ImageNet pair rank 0 "started last" at
    three all-reduces by 6-15 µs and outvoted rank 1, 5.6 ms late at the fourth. Its mean lateness must be
    at least `min_wait_share` of the mean step (the 1 % HTA's straggler analysis takes as a long kernel):
    someone always starts last.

    How much it costs decides the severity: its peers' wait for it per step (its summed lateness over
    the trace's steps) of at least `slow_step_share` of the mean step (5 %: the bar of msprof-analyze's
    advisor and of the live slow-rank rules) is a slow rank (`warning`); below it, a late arriver worth
    knowing (`info`): a rank 5.6 ms late once in a 155 ms step (3.6 %) is named, not flagged."""
    collectives = match_collectives(profiles)
    arrivals = late_arrivals(collectives.matched)
    if not arrivals:
        return []
    voters = [a for a in arrivals if a.late_rank == a.shortest_rank] or arrivals
    waited: dict[int, float] = {}
    for a in voters:
        waited[a.late_rank] = waited.get(a.late_rank, 0.0) + a.lateness_us
    rank = max(waited, key=lambda r: waited[r])
    share = waited[rank] / sum(waited.values())
    if share < min_share:
        return []
    count = sum(1 for a in voters if a.late_rank == rank)
    lateness = [a.lateness_us for a in arrivals if a.late_rank == rank]
    steps = [s.dur for p in profiles for s in p.steps if s.dur > 0]
    mean_step = float(np.mean(steps)) if steps else 0.0
    if steps and sum(lateness) / len(lateness) < min_wait_share * mean_step:
        return []
    left_out = (f" ({collectives.unmatched} collectives that only one rank's trace holds left out: matched by "
                "their common end)" if collectives.unmatched else "")
    n_steps = max(len(p.steps) for p in profiles)
    step_share = sum(lateness) / n_steps / mean_step if steps else None
    cost = ""
    if step_share is not None:
        cost = f"; they wait {100 * step_share:.1f} % of a step for it"
        if step_share < slow_step_share:
            cost += f" (under the {100 * slow_step_share:.0f} % that makes a slow rank)"
    return [ProfileFinding(
        "slow_rank",
        f"rank {rank} arrives last (and runs the shortest kernel) at {count} of {len(arrivals)} collectives; "
        f"the others wait {sum(lateness) / len(lateness) / 1e3:.2f} ms on average{cost}{left_out}",
        {"late_share": share, "collectives": float(len(arrivals)), "mean_lateness_us": sum(lateness) / len(lateness),
         "unmatched_collectives": float(collectives.unmatched),
         **({"wait_step_share": step_share} if step_share is not None else {})},
        rank=rank, severity="warning" if step_share is None or step_share >= slow_step_share else "info",
    )]


def late_start_straggler(profiles: list[Profile], min_normalized_duration: float = 0.01) -> int | None:
    """The rank that starts the most variable long collective last, most often across steps.

    The same metric HolisticTraceAnalysis' `get_potential_stragglers` uses by default: long
    communication kernels (≥ 1 % of the mean step), the last per (rank, stream, step, kernel),
    the (stream, kernel) whose duration varies most across ranks, then the latest normalized
    start per step. Unlike HTA 0.5 it also recognises `ncclDevKernel_*` names (HTA #360).
    """
    from streams.profiles.analysis.breakdown import kernel_steps

    rows: list[tuple[int, int, int, str, float, float]] = []  # rank, stream, step, name, ts, dur
    t_min = math.inf
    t_max = -math.inf
    n_steps = 0
    for p in profiles:
        if p.rank is None or len(p.kernels) == 0:
            continue
        steps = kernel_steps(p)
        k = p.kernels
        t_min = min(t_min, float(k.ts.min()))
        t_max = max(t_max, float((k.ts + k.dur).max()))
        n_steps = max(n_steps, len(p.steps))
        comm = np.flatnonzero((k.kind == COMMUNICATION) & (steps >= 0))
        for i in comm.tolist():
            rows.append((p.rank, int(k.stream[i]), int(steps[i]), p.names[int(k.name[i])],
                         float(k.ts[i]), float(k.dur[i])))
    if not rows or n_steps == 0:
        return None
    mean_iter = (t_max - t_min) / n_steps
    last: dict[tuple[int, int, int, str], tuple[float, float]] = {}
    for rank, stream, step, name, ts, dur in sorted(rows, key=lambda r: r[4]):
        if dur >= mean_iter * min_normalized_duration:
            last[(rank, stream, step, name)] = (ts, dur)
    if not last:
        return None
    spread: dict[tuple[int, str], list[float]] = {}
    per_step: dict[tuple[int, int, str], list[float]] = {}
    for (_rank, stream, step, name), (_ts, dur) in last.items():
        per_step.setdefault((stream, step, name), []).append(dur / mean_iter)
    for (stream, _step, name), durs in per_step.items():
        if len(durs) >= 2:
            spread.setdefault((stream, name), []).append(float(np.std(durs, ddof=1)))
    if not spread:
        return None
    stream_sel, name_sel = max(spread, key=lambda key: float(np.mean(spread[key])))
    votes: Counter[int] = Counter()
    by_step: dict[int, list[tuple[float, int]]] = {}
    for (rank, stream, step, name), (ts, _dur) in last.items():
        if stream == stream_sel and name == name_sel:
            by_step.setdefault(step, []).append((ts, rank))
    for entries in by_step.values():
        votes[max(entries)[1]] += 1
    return votes.most_common(1)[0][0] if votes else None
