"""Cause -> optimisation, after Hermes' advisor table (spec §3), keyed by the phase that grew."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Advice:
    cause: str
    suggestion: str


_ADVICE: dict[str, Advice] = {
    "gc_ms": Advice(
        "Python garbage-collection pauses",
        "raise gc.set_threshold, or gc.disable() with a periodic gc.collect() between steps",
    ),
    "data_ms": Advice(
        "slow data loading",
        "more DataLoader workers, pin_memory and prefetch; local instead of remote storage",
    ),
    "interstep_cpu_ms": Advice(
        "CPU work between steps",
        "move logging/checkpointing off the step boundary; remove sync ops such as tensor.item()",
    ),
    "comm_exposed_ms": Advice(
        "exposed (non-overlapped) communication",
        "gradient bucketing/fusion and comm-compute overlap; check link health (R5/R6)",
    ),
    "optimizer_ms": Advice(
        "slow optimizer step",
        "fused/foreach optimizer kernels; check for host-device syncs in the optimizer",
    ),
}

_COMPUTE = Advice(
    "slow compute on the device",
    "check the device for down-clocking or thermal throttling and the host for foreign "
    "processes (CPU contention); isolate the node if it persists",
)

COMPUTE_PHASES = ("forward_ms", "backward_ms", "grad_ms")


def advise(phase: str | None) -> Advice:
    """Advice for the phase that explains the slowdown (compute phases share one entry)."""
    if phase is None:
        return Advice("unknown", "enable detailed profiling for the affected ranks and steps")
    return _ADVICE.get(phase, _COMPUTE)
