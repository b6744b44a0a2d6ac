"""Per-step kernel aggregation for the always-on kernel summary (contract 1.1).

One `_Agg` per key (metric+shape, op/domain, copy direction), updated in O(1) per kernel;
launch latencies are kept per step only to compute the mean absolute deviation (R8) and the
first call of every key over the whole run is excluded as cold (T15).

The rank hook's training thread only appends raw record tuples (`COLL`, `KERNEL`, `OTHER`; at
most MAX_RAW_RECORDS_PER_STEP per step); its builder thread feeds them here (`add_raw`) and
sends the step's `kernel_summary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from producers.hook.identity import RankInfo
from schemas import KernelSummary
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory
from schemas.kernel_summary import MAX_AGGREGATES_PER_SUMMARY, KernelAggregate

MAX_RAW_RECORDS_PER_STEP = 100_000  # kernel/collective records kept per step before counting drops
COLL, KERNEL, OTHER = 0, 1, 2  # kinds of raw kernel records


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


def add_raw(agg: KernelAggregator, records: list[tuple[Any, ...]]) -> None:
    """Start `agg` afresh and add one step's raw records, as the rank hook appended them:
    (COLL, op, dur_ns, nbytes, domain, group_size, launch_us),
    (KERNEL, key, cat, dur_ns, metric, shape, flops, nbytes, direction, launch_us, monitored), (OTHER, dur_ns)."""
    agg.reset()
    for rec in records:
        kind = rec[0]
        if kind == COLL:
            _, op, dur, nbytes, domain, group_size, launch_us = rec
            agg.add(f"{op}/{domain or '-'}", "comm", dur, op=op, domain=domain, group_size=group_size,
                    nbytes=nbytes, launch_us=launch_us)
        elif kind == KERNEL:
            _, key, cat, dur, metric, shape, flops, nbytes, direction, launch_us, _m = rec
            agg.add(key, cat, dur, metric=metric, shape=shape, flops=flops, nbytes=nbytes, direction=direction,
                    launch_us=launch_us)
        else:
            agg.add_other(rec[1])


def kernel_summary(r: RankInfo, step: int, kernels: AggSnapshot) -> KernelSummary:
    """The step's KernelSummary event."""
    return KernelSummary(job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device,
                         domains=r.domains, step=step, attempt=r.attempt, **kernels.summary_fields())
