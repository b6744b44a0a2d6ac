"""Per-kernel detail, shipped as one batch per rank-step.

One message per (rank, step) rather than per kernel keeps a 10,000-rank fleet at
10,000 messages per step, and lets a worker process a step's kernels as one array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from schemas.decoding import join, require
from schemas.identity import DOMAIN_TYPES, RankIdentity

KernelCategory = Literal["compute", "comm", "memcpy", "sync", "other"]
CollectiveOp = Literal[
    "allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "send", "recv", "barrier",
]
CopyDirection = Literal["h2d", "d2h", "d2d", "h2h"]

MAX_KERNELS_PER_BATCH = 50_000


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRecord:
    """One device kernel / runtime call.

    start_ns: device start (epoch ns); dur_ns: device duration.
    submit_ns: host-side launch/submit time, for launch latency (T15, R8).
    metric: the spec id the producer classified it as (F1, B2, G1, T9, ...), when known.
    shape: FLOP-relevant sizes (B, N, D, Sq, Sk for attention; B, M, N, K for matmul;
           B, S, Din, Dmid for FFN), so the worker can compute TFLOP/s.
    Collectives: op, bytes, count, dtype, domain (which of the rank's domains), group_name
    (the process group's name in the trace) and group_size.
    Copies: bytes and direction.
    """

    name: str
    cat: KernelCategory
    start_ns: int
    dur_ns: int
    submit_ns: int | None = None
    stream: int | None = None
    metric: str | None = None
    shape: dict[str, int] | None = None
    flops: float | None = None
    op: CollectiveOp | None = None
    bytes: int | None = None
    count: int | None = None
    dtype: str | None = None
    domain: str | None = None
    group_name: str | None = None
    group_size: int | None = None
    direction: CopyDirection | None = None

    def check(self, path: str) -> None:
        require(bool(self.name), join(path, "name"), "must not be empty")
        require(self.dur_ns >= 0, join(path, "dur_ns"), "must be >= 0")
        require(self.start_ns > 0, join(path, "start_ns"), "must be a positive epoch timestamp in ns")
        for name in ("bytes", "count", "flops"):
            value = getattr(self, name)
            require(value is None or value >= 0, join(path, name), "must be >= 0")
        require(self.group_size is None or self.group_size >= 1, join(path, "group_size"), "must be >= 1")
        require(
            self.domain is None or self.domain in DOMAIN_TYPES,
            join(path, "domain"),
            f"must be one of {', '.join(DOMAIN_TYPES)}",
        )
        if self.cat == "comm":
            require(self.op is not None, join(path, "op"), "is required for cat 'comm'")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelBatch(RankIdentity):
    """All monitored kernels of one rank in one step (topic steplens.kernels).

    dropped: kernels the hook sampled out or lost, so rates can be corrected and losses seen.
    """

    TYPE: ClassVar[str] = "kernels"

    step: int
    kernels: list[KernelRecord]
    dropped: int = 0

    def check(self, path: str) -> None:
        RankIdentity.check(self, path)
        require(self.step >= 0, join(path, "step"), "must be >= 0")
        require(self.dropped >= 0, join(path, "dropped"), "must be >= 0")
        require(
            len(self.kernels) <= MAX_KERNELS_PER_BATCH,
            join(path, "kernels"),
            f"has {len(self.kernels)} records, at most {MAX_KERNELS_PER_BATCH} per batch",
        )
