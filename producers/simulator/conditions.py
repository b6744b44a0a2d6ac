"""What a fault makes of the job itself, beside its per-step effects: the hardware a job runs on from its first
step (a socket fallback, down-clocked devices) and a memory leak's growth per step.

Why a module of its own: `FleetJob` builds its plan on this hardware and stops at the leak's out-of-memory
step, and the catalogue's faults are built on `FleetJob`; here both read the same figures without importing
each other (tests/test_architecture.py forbids import cycles).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from producers.simulator.model import TCP_SOCKETS, Hardware

if TYPE_CHECKING:
    from producers.simulator.catalogue import FaultSpec

DEVICE_MEM_GB = 64.0  # the simulated device's memory (an Ascend 910B's HBM), what a leak's bytes are a share of


def magnitude(f: FaultSpec, key: str, default: float) -> float:
    return float(f.magnitude.get(key, default))


def job_hardware(hw: Hardware, faults: Iterable[FaultSpec]) -> Hardware:
    """The hardware a job runs on, its job-long conditions applied: a socket fallback puts its inter-host
    collectives on TCP_SOCKETS, a degraded fabric lowers the inter-host links' bandwidth (`bw_factor` of RoCE's:
    congestion control or PFC misconfigured by a switch rollout, every job on that fabric), a down-clock lowers
    every device's clock (`clock_factor` of the rated one)."""
    for f in faults:
        if f.kind == "socket_fallback":
            hw = replace(hw, inter=TCP_SOCKETS)
        elif f.kind == "fabric_degraded":
            hw = replace(hw, inter=replace(hw.inter, bw_gbps=hw.inter.bw_gbps * magnitude(f, "bw_factor", 0.4)))
        elif f.kind == "downclock":
            hw = replace(hw, freq_mhz=hw.rated_mhz * magnitude(f, "clock_factor", 0.8))
    return hw


def leak_pct(f: FaultSpec) -> float:
    """A `memory_leak`'s (or an `allocator_fragmentation`'s stranded reserve's) growth in % of the device's
    capacity per step, from its bytes per step."""
    key = "frag_mb_per_step" if f.kind == "allocator_fragmentation" else "leak_mb_per_step"
    return magnitude(f, key, 64.0) / (magnitude(f, "device_gb", DEVICE_MEM_GB) * 1024.0) * 100.0
