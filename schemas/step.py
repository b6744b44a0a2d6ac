"""Per-rank, per-step record: the always-on, lightweight monitor (Hermes' coarse level)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from schemas.decoding import join, require
from schemas.identity import RankIdentity


@dataclass(frozen=True, slots=True, kw_only=True)
class Phases:
    """Wall time per phase of one step on one rank, in milliseconds; null = not measured.

    data_ms: DataLoader `__next__` latency (D1's batch_latency).
    forward_ms / backward_ms / optimizer_ms: phase wall times (backward = B4).
    grad_ms: `torch.autograd.grad` wall time (B5), when used.
    comm_exposed_ms: communication not overlapped by compute (time spent waiting).
    interstep_cpu_ms: host gap between the last kernel of a step and the first of the next (R10).
    gc_ms: total Python GC pause inside the step (T8).
    """

    data_ms: float | None = None
    forward_ms: float | None = None
    backward_ms: float | None = None
    grad_ms: float | None = None
    optimizer_ms: float | None = None
    comm_exposed_ms: float | None = None
    interstep_cpu_ms: float | None = None
    gc_ms: float | None = None

    NAMES: ClassVar[tuple[str, ...]] = (
        "data_ms", "forward_ms", "backward_ms", "grad_ms",
        "optimizer_ms", "comm_exposed_ms", "interstep_cpu_ms", "gc_ms",
    )

    def check(self, path: str) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            require(value is None or value >= 0, join(path, f.name), "must be >= 0 ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEvent(RankIdentity):
    """One training step as seen by one rank (topic steplens.steps).

    attempt (contract 1.4): the job's launch this step belongs to (see JobEvent.attempt); a
    relaunch re-runs steps from its checkpoint, and each attempt's steps are kept apart.
    mem_peak_bytes / mem_reserved_bytes (contract 1.5): the device memory the step allocated at its
    peak (the allocator's peak statistic, reset at the step's start: PyTorch's
    `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()`) and the caching allocator's
    reserved bytes at the step's end (`torch.cuda.memory_reserved()`); None where the rank runs on no
    accelerator or the framework has no such statistic. Reserved far above the peak is fragmentation.
    mem_capacity_bytes (contract 1.5): the device's memory capacity (PyTorch
    `torch.cuda.get_device_properties(d).total_memory`), what the peak and reserved bytes are a share of
    for the OOM forecast; None where not known.
    """

    TYPE: ClassVar[str] = "step"

    step: int
    start_ns: int
    end_ns: int
    phases: Phases = field(default_factory=Phases)
    gc_count: int | None = None
    batch_size: int | None = None
    samples: int | None = None
    tokens: int | None = None
    flops: float | None = None
    peak_flops: float | None = None
    profiling: bool = False
    attempt: int = 0
    mem_peak_bytes: int | None = None
    mem_reserved_bytes: int | None = None
    mem_capacity_bytes: int | None = None

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def check(self, path: str) -> None:
        RankIdentity.check(self, path)
        require(self.step >= 0, join(path, "step"), "must be >= 0")
        require(self.start_ns > 0, join(path, "start_ns"), "must be a positive epoch timestamp in ns")
        require(self.end_ns >= self.start_ns, join(path, "end_ns"), "must be >= start_ns")
        for name in ("gc_count", "batch_size", "samples", "tokens", "mem_peak_bytes", "mem_reserved_bytes",
                     "mem_capacity_bytes"):
            value = getattr(self, name)
            require(value is None or value >= 0, join(path, name), "must be >= 0")
        for name in ("flops", "peak_flops"):
            value = getattr(self, name)
            require(value is None or value >= 0, join(path, name), "must be >= 0")
