"""Device memory per step (contract 1.5): the allocator's peak during the step and what it holds reserved.

Why per step and from the allocator: a leak shows as a peak that grows step after step, long before the
device is full, and fragmentation as reserved bytes far above the peak; a device-wide sample (the node
sampler's `mem_pct`) sees neither apart from the caching allocator's reservation. Every framework the hook
serves keeps these statistics on the host, updated as it allocates, so reading them costs a few
microseconds and no device synchronisation:

- PyTorch on CUDA: `torch.cuda.max_memory_allocated()`, `torch.cuda.memory_reserved()`,
  `torch.cuda.reset_peak_memory_stats()`;
- torch_npu (Ascend): the same three under `torch.npu`;
- MindSpore (2.3 on): `mindspore.runtime.max_memory_allocated()`, `memory_reserved()`,
  `reset_peak_memory_stats()` (`mindspore.hal` in older releases).

On a CPU-only rank there is no device allocator to read and the fields stay out of the step event (None).
The hook reads the peak at the end of each step and resets it then, so each step's peak covers its own
allocations (and those between the previous step's end and its begin: a prefetch to the device is part of
the step it feeds); before the first step the peak is reset once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    """A framework's allocator statistics, as three calls: the peak allocated bytes since the last reset,
    the bytes reserved now, and the reset of the peak. `name` says which API it is (for logs and tests).
    `capacity`: the device's memory in bytes, read once (it does not change), what the OOM forecast
    measures the peak against; None where the framework does not say."""

    name: str
    max_allocated: Callable[[], int]
    reserved: Callable[[], int]
    reset_peak: Callable[[], None]
    capacity: int | None = None

    def read(self) -> tuple[int | None, int | None]:
        """(peak allocated, reserved) in bytes, each None when the call gives no non-negative int; then
        the peak is reset for the next step. Raises what the framework raises (the hook counts it)."""
        peak, reserved = _bytes(self.max_allocated()), _bytes(self.reserved())
        self.reset_peak()
        return peak, reserved


def _bytes(value: object) -> int | None:
    """A statistic as the contract's non-negative int (frameworks give int; a mock or a binding may not)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 2**63 - 1:
        return None
    return value


def capacity_of(value: object) -> int | None:
    """A device's memory capacity as the contract's positive int, None when it is not one."""
    got = _bytes(value)
    return got if got else None


def module_stats(module: object, name: str) -> AllocatorStats | None:
    """`AllocatorStats` of a module with PyTorch's allocator API (`torch.cuda`, `torch.npu`,
    `mindspore.runtime`); None when it lacks one of the three calls."""
    calls = [getattr(module, attr, None) for attr in ("max_memory_allocated", "memory_reserved",
                                                      "reset_peak_memory_stats")]
    if not all(callable(c) for c in calls):
        return None
    max_allocated, reserved, reset_peak = calls
    return AllocatorStats(name, max_allocated, reserved, reset_peak)  # type: ignore[arg-type]


__all__ = ["AllocatorStats", "capacity_of", "module_stats"]
