"""Always-on kernel summary (contract 1.1): one small message per rank-step.

Raw `kernels` batches are too large to send for every step of a 10,240-rank job, so the
hook aggregates its step's kernels on the rank and ships only what rules R4–R9 need:

- R4 kernel efficiency: FLOPs and device time per (metric id, shape) -> FLOP/s;
- R5/R6 slow rank / slow group: bytes and time per (collective op, domain) -> bandwidth;
- R7 minority-kernel gap: the monitored kernel time of the step (sum of `total_ns`);
- R8 launch-latency shape: launch latency mean and mean absolute deviation per aggregate,
  so CU = 1 - mad / mean without raw records;
- R9 copy rate: bytes and time per copy direction.

Raw `kernels` batches stay in the contract, for profiled steps only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from schemas.decoding import join, require
from schemas.identity import DOMAIN_TYPES, RankIdentity
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory

MAX_AGGREGATES_PER_SUMMARY = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelAggregate:
    """All kernels of one kind that one rank ran in one step.

    key: what was aggregated, stable across steps so a worker can follow it: the metric id
         and shape for compute ("F2:4096x4096x4096"), op and domain for collectives
         ("allreduce/dp"), direction for copies ("h2d").
    count / total_ns / max_ns: how many kernels, their summed and their longest device time.
    flops / bytes: summed over the `count` kernels (TFLOP/s = flops / total_ns / 1e3).
    launch_mean_us / launch_mad_us: T15 launch latency (device start - host submit), mean and
         mean absolute deviation over the aggregate, first (cold) call excluded.
    """

    key: str
    cat: KernelCategory
    count: int
    total_ns: int
    max_ns: int | None = None
    metric: str | None = None
    shape: dict[str, int] | None = None
    flops: float | None = None
    op: CollectiveOp | None = None
    domain: str | None = None
    group_size: int | None = None
    bytes: int | None = None
    direction: CopyDirection | None = None
    launch_mean_us: float | None = None
    launch_mad_us: float | None = None

    def check(self, path: str) -> None:
        require(bool(self.key), join(path, "key"), "must not be empty")
        require(self.count >= 1, join(path, "count"), "must be >= 1")
        require(self.total_ns >= 0, join(path, "total_ns"), "must be >= 0")
        require(self.max_ns is None or 0 <= self.max_ns <= self.total_ns, join(path, "max_ns"),
                "must be in [0, total_ns]")
        for name in ("flops", "bytes", "launch_mean_us", "launch_mad_us"):
            value = getattr(self, name)
            require(value is None or value >= 0, join(path, name), "must be >= 0")
        require(self.group_size is None or self.group_size >= 1, join(path, "group_size"), "must be >= 1")
        require(self.domain is None or self.domain in DOMAIN_TYPES, join(path, "domain"),
                f"must be one of {', '.join(DOMAIN_TYPES)}")
        if self.cat == "comm":
            require(self.op is not None, join(path, "op"), "is required for cat 'comm'")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelSummary(RankIdentity):
    """The kernels of one rank in one step, aggregated (topic steplens.kernel-summaries).

    entries: one aggregate per monitored kind (see KernelAggregate.key).
    other_count / other_ns: kernels outside every monitored kind (R7's minority kernels).
    dropped: kernels the hook could not record (counted, never silent).
    attempt (contract 1.4): the job's launch, as on the step event.
    """

    TYPE: ClassVar[str] = "kernel_summary"

    step: int
    entries: list[KernelAggregate]
    other_count: int = 0
    other_ns: int = 0
    dropped: int = 0
    attempt: int = 0

    @property
    def monitored_ns(self) -> int:
        """Summed device time of the monitored kernels (R7's sum of monitored kernel time)."""
        return sum(e.total_ns for e in self.entries)

    def check(self, path: str) -> None:
        RankIdentity.check(self, path)
        require(self.step >= 0, join(path, "step"), "must be >= 0")
        for name in ("other_count", "other_ns", "dropped"):
            require(getattr(self, name) >= 0, join(path, name), "must be >= 0")
        require(len(self.entries) <= MAX_AGGREGATES_PER_SUMMARY, join(path, "entries"),
                f"has {len(self.entries)} aggregates, at most {MAX_AGGREGATES_PER_SUMMARY}")
