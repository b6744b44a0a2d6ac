"""Across ranks (spec §3): the late arriver of each collective and the cluster verdict.

In a synchronous collective every rank leaves together, so the rank that *starts* last and has
the *shortest* kernel is the one the others waited for. Collectives are matched across ranks by
(group, op, sequence number within the group). Pipeline stages are kept apart: only ranks of the
same stage are compared, and point-to-point transfers (the pipeline's own send/recv, whose waits
are bubbles by design) do not vote.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from streams.profiles.analysis.findings import Finding
from streams.profiles.model import ClusterTable, Profile

P2P_OPS = frozenset(("sendrecv", "send", "recv", "p2p", "batchsendrecv"))


@dataclass(frozen=True, slots=True)
class LateArrival:
    key: tuple[str, str, int]
    late_rank: int
    lateness_us: float  # last start − first start
    shortest_rank: int


def late_arrivals(profiles: list[Profile]) -> list[LateArrival]:
    by_stage: dict[int | None, list[Profile]] = {}
    for p in profiles:
        if p.rank is not None:
            by_stage.setdefault(p.stage, []).append(p)
    out: list[LateArrival] = []
    for members in by_stage.values():
        table: dict[tuple[str, str, int], dict[int, tuple[float, float]]] = {}
        for p in members:
            assert p.rank is not None
            for c in p.collectives:
                if c.op in P2P_OPS:
                    continue
                table.setdefault((c.group, c.op, c.seq), {})[p.rank] = (c.ts, c.dur)
        for key, per_rank in table.items():
            if len(per_rank) < 2:
                continue
            late = max(per_rank, key=lambda r: per_rank[r][0])
            first = min(v[0] for v in per_rank.values())
            shortest = min(per_rank, key=lambda r: per_rank[r][1])
            out.append(LateArrival(key, late, per_rank[late][0] - first, shortest))
    return out


def cluster_verdict(profiles: list[Profile], min_share: float = 0.5) -> list[Finding]:
    arrivals = late_arrivals(profiles)
    if not arrivals:
        return []
    votes = Counter(a.late_rank for a in arrivals if a.late_rank == a.shortest_rank)
    if not votes:
        votes = Counter(a.late_rank for a in arrivals)
    rank, count = votes.most_common(1)[0]
    share = count / len(arrivals)
    if share < min_share:
        return []
    lateness = [a.lateness_us for a in arrivals if a.late_rank == rank]
    return [Finding(
        "slow_rank",
        f"rank {rank} arrives last (and runs the shortest kernel) at {count} of {len(arrivals)} collectives; "
        f"the others wait {sum(lateness) / len(lateness) / 1e3:.2f} ms on average",
        {"late_share": share, "collectives": float(len(arrivals)), "mean_lateness_us": sum(lateness) / len(lateness)},
        rank=rank,
    )]


def cluster_table_verdict(table: ClusterTable) -> list[Finding]:
    """msprof-analyze outputs: the rank with the least wait in collectives is the one others wait for;
    the rank with the most compute per step is the slow one (msprof-analyze's own slow-rank rule)."""
    findings: list[Finding] = []
    ranks = [r for r in table.steps if str(r.get("Type", "rank")) == "rank"]
    if len(ranks) >= 2:
        def comp(row: dict[str, Any]) -> float:
            return float(row.get("Computing", 0.0) or 0.0)
        slow = max(ranks, key=comp)
        mean = sum(comp(r) for r in ranks) / len(ranks)
        if mean > 0 and comp(slow) > 1.05 * mean:
            findings.append(Finding(
                "slow_rank", f"rank {slow.get('Index')} computes {comp(slow) / mean:.2f}× the mean in step "
                f"{slow.get('Step')}", {"computing_us": comp(slow), "mean_us": mean}, rank=int(slow["Index"])))
    waits: dict[int, list[float]] = {}
    for row in table.collectives:
        if row.get("rank", -1) >= 0 and "Wait Time(ms)" in row:
            waits.setdefault(int(row["rank"]), []).append(float(row["Wait Time(ms)"]))
    if len(waits) >= 2:
        mean_wait = {r: sum(v) / len(v) for r, v in waits.items()}
        late = min(mean_wait, key=lambda r: mean_wait[r])
        others = [w for r, w in mean_wait.items() if r != late]
        if others and sum(others) / len(others) > 2 * mean_wait[late] + 0.1:
            findings.append(Finding(
                "slow_rank", f"rank {late} waits {mean_wait[late]:.2f} ms per collective, the others "
                f"{sum(others) / len(others):.2f} ms: they wait for rank {late}",
                {"wait_ms": mean_wait[late], "others_wait_ms": sum(others) / len(others)}, rank=late))
    return findings
