"""Per-step kernel aggregation for the always-on kernel summary (contract 1.1).

One `_Agg` per key (metric+shape, op/domain, copy direction), updated in O(1) per kernel;
launch latencies are kept per step only to compute the mean absolute deviation (R8) and the
first call of every key over the whole run is excluded as cold (T15).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory
from schemas.kernel_summary import MAX_AGGREGATES_PER_SUMMARY, KernelAggregate


@dataclass(slots=True)
class _Agg:
    cat: KernelCategory
    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    flops: float | None = None
    nbytes: int | None = None
    metric: str | None = None
    shape: dict[str, int] | None = None
    op: CollectiveOp | None = None
    domain: str | None = None
    group_size: int | None = None
    direction: CopyDirection | None = None
    launches: list[float] = field(default_factory=list)


class KernelAggregator:
    """Aggregates one step's kernels; `reset()` at each step begin."""

    def __init__(self) -> None:
        self._aggs: dict[str, _Agg] = {}
        self._seen: set[str] = set()
        self.other_count = 0
        self.other_ns = 0
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self._aggs) or self.other_count > 0

    def reset(self) -> None:
        if self._aggs:
            self._aggs = {}
        self.other_count = self.other_ns = self.dropped = 0

    def add(
        self,
        key: str,
        cat: KernelCategory,
        dur_ns: int,
        *,
        metric: str | None = None,
        shape: dict[str, int] | None = None,
        flops: float | None = None,
        nbytes: int | None = None,
        op: CollectiveOp | None = None,
        domain: str | None = None,
        group_size: int | None = None,
        direction: CopyDirection | None = None,
        launch_us: float | None = None,
    ) -> None:
        agg = self._aggs.get(key)
        if agg is None:
            if len(self._aggs) >= MAX_AGGREGATES_PER_SUMMARY:
                self.dropped += 1
                return
            agg = self._aggs[key] = _Agg(cat=cat, metric=metric, shape=shape, op=op, domain=domain,
                                         group_size=group_size, direction=direction)
        dur = max(int(dur_ns), 0)
        agg.count += 1
        agg.total_ns += dur
        if dur > agg.max_ns:
            agg.max_ns = dur
        if flops is not None:
            agg.flops = (agg.flops or 0.0) + flops
        if nbytes is not None:
            agg.nbytes = (agg.nbytes or 0) + nbytes
        if launch_us is not None:
            if key in self._seen:
                agg.launches.append(launch_us)
            else:
                self._seen.add(key)  # the first (cold) call of a kind is excluded (T15)

    def add_other(self, dur_ns: int) -> None:
        self.other_count += 1
        self.other_ns += max(int(dur_ns), 0)

    def take(self) -> AggSnapshot | None:
        """Hand this step's aggregates over (to be turned into a summary elsewhere) and start afresh."""
        if not self:
            return None
        snap = AggSnapshot(self._aggs, self.other_count, self.other_ns, self.dropped)
        self._aggs = {}
        self.other_count = self.other_ns = self.dropped = 0
        return snap

    def entries(self) -> list[KernelAggregate]:
        return _entries(self._aggs)

    def summary_fields(self) -> dict[str, Any]:
        return {"entries": self.entries(), "other_count": self.other_count, "other_ns": self.other_ns,
                "dropped": self.dropped}


@dataclass(frozen=True, slots=True)
class AggSnapshot:
    """One step's aggregates, detached from the aggregator."""

    aggs: dict[str, _Agg]
    other_count: int
    other_ns: int
    dropped: int

    def summary_fields(self) -> dict[str, Any]:
        return {"entries": _entries(self.aggs), "other_count": self.other_count, "other_ns": self.other_ns,
                "dropped": self.dropped}


def _entries(aggs: dict[str, _Agg]) -> list[KernelAggregate]:
    out: list[KernelAggregate] = []
    for key, a in aggs.items():
        mean = mad = None
        if a.launches:
            mean = sum(a.launches) / len(a.launches)
            mad = sum(abs(x - mean) for x in a.launches) / len(a.launches)
        out.append(KernelAggregate(
            key=key, cat=a.cat, count=a.count, total_ns=a.total_ns, max_ns=a.max_ns, metric=a.metric,
            shape=a.shape, flops=a.flops, op=a.op, domain=a.domain, group_size=a.group_size, bytes=a.nbytes,
            direction=a.direction, launch_mean_us=mean, launch_mad_us=mad,
        ))
    return out
