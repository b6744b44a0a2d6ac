"""One row per rank, side by side: where the per-rank findings come from, readable at a glance.

From profiles: the mean per-step breakdown (breakdown.py). From msprof-analyze's step-trace table:
its own columns, averaged over the steps it lists. Both carry the rank's pipeline stage and how
many matched collectives it was the one the others waited for (waits.py: the shortest time).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from streams.profiles.analysis.breakdown import Breakdown
from streams.profiles.analysis.cluster_table import (
    BUBBLE,
    COMM_NO,
    COMMUNICATION,
    COMPUTING,
    FREE,
    OVERLAPPED,
    stages_of,
)
from streams.profiles.analysis.waits import CollectiveWait
from streams.profiles.model import ClusterTable, Profile


@dataclass(frozen=True, slots=True)
class RankRow:
    """Means per step, µs (NaN where the source has no such figure)."""

    rank: int | None
    source: str
    stage: int | None
    steps: int
    span: float
    compute: float
    communication: float
    overlapped: float
    communication_not_overlapped: float
    free: float
    bubble: float
    waited_for: int  # collectives where the others waited for this rank


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def rank_rows(profiles: Sequence[tuple[Profile, list[Breakdown]]], clusters: Sequence[ClusterTable],
              waits: Sequence[CollectiveWait]) -> list[RankRow]:
    late = Counter((w.source, w.late_rank) for w in waits if w.r_wait > 0)
    rows = []
    for p, steps in profiles:
        rows.append(RankRow(
            p.rank, p.source, p.stage, len(steps), _mean([b.span for b in steps]), _mean([b.compute for b in steps]),
            _mean([b.communication for b in steps]), _mean([b.overlapped for b in steps]),
            _mean([b.communication_not_overlapped for b in steps]), _mean([b.free for b in steps]), math.nan,
            late.get(("", p.rank), 0) if p.rank is not None else 0))
    for table in clusters:
        stage_of = stages_of(table)
        per_rank: dict[int, list[dict[str, float]]] = {}
        for r in table.steps:
            if str(r.get("Type", "rank")) == "rank" and isinstance(r.get("Index"), int):
                per_rank.setdefault(int(r["Index"]), []).append(
                    {k: float(v) if isinstance(v, int | float) else math.nan for k, v in r.items()})
        for rank in sorted(per_rank):
            vals = per_rank[rank]

            def col(name: str, vals: list[dict[str, float]] = vals) -> float:
                return _mean([v.get(name, math.nan) for v in vals])

            span = col(COMPUTING) + col(COMM_NO) + col(FREE)
            rows.append(RankRow(rank, table.source, stage_of.get(rank), len(vals), span, col(COMPUTING),
                                col(COMMUNICATION), col(OVERLAPPED), col(COMM_NO), col(FREE), col(BUBBLE),
                                late.get((table.source, rank), 0)))
    return sorted(rows, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.source))
