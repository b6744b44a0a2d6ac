"""Wait ratio per collective (spec §3): R_wait = 1 − T_avg / T_max over the ranks that ran it.

Every rank leaves a synchronous collective together, so the time a rank spends in it beyond the
shortest is waiting for the last to arrive; R_wait = 0 when all took equally long, and grows
toward 1 as the others wait for one late rank (the one with the shortest time: it waited for
nobody). Matched across ranks by (stage, group, op, n-th such op) for profiles (ranks.py), by
(group, step, op) in msprof-analyze's `cluster_communication.json`; point-to-point transfers are
left out (their waits are the pipeline's bubble).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from streams.profiles.analysis.cluster_table import is_p2p
from streams.profiles.analysis.ranks import matched_collectives
from streams.profiles.model import ClusterTable, Profile


@dataclass(frozen=True, slots=True)
class CollectiveWait:
    group: str
    op: str
    index: str  # n-th of the op in the group (profiles) or the step (cluster tables)
    ranks: int
    t_max_us: float
    t_avg_us: float
    late_rank: int  # the shortest time: the rank the others waited for
    source: str = ""  # "" for profiles, else the cluster table's source

    @property
    def r_wait(self) -> float:
        return 1.0 - self.t_avg_us / self.t_max_us if self.t_max_us > 0 else 0.0


def _wait(group: str, op: str, index: str, per_rank: dict[int, float], source: str = "") -> CollectiveWait | None:
    durations = {r: d for r, d in per_rank.items() if not math.isnan(d)}
    if len(durations) < 2:
        return None
    late = min(durations, key=lambda r: durations[r])
    return CollectiveWait(group, op, index, len(durations), max(durations.values()),
                          sum(durations.values()) / len(durations), late, source)


def collective_waits(profiles: list[Profile], clusters: Sequence[ClusterTable] = ()) -> list[CollectiveWait]:
    """Every matched collective with its R_wait, highest first."""
    out: list[CollectiveWait] = []
    for (_stage, group, op, n), per_rank in matched_collectives(profiles).items():
        w = _wait(group, op, f"#{n}", {r: dur for r, (_ts, dur) in per_rank.items()})
        if w is not None:
            out.append(w)
    for table in clusters:
        p2p_groups = {frozenset(g["ranks"]) for g in table.groups if g.get("kind") == "p2p"}
        rows: dict[tuple[str, str, str], dict[int, float]] = {}
        for row in table.collectives:
            if row.get("rank", -1) < 0 or is_p2p(row, p2p_groups):
                continue
            path = [str(x) for x in row.get("path", [])]
            step = next((x for x in path if x.lower().startswith("step")), "")
            key = (str(row.get("group", "")), str(row.get("op", "")), step)
            rows.setdefault(key, {})[int(row["rank"])] = float(row.get("Elapse Time(ms)", math.nan)) * 1e3
        for (group, op, step), durations in rows.items():
            w = _wait(group, op.partition("@")[0], step, durations, table.source)
            if w is not None:
                out.append(w)
    return sorted(out, key=lambda w: -w.r_wait)
