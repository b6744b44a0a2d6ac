"""Deterministic cluster simulator: StepEvents for a Megatron-style job with injected, known faults."""

from producers.simulator.cluster import DEFAULT_START_NS, SimStep, SimulatedJob, Timings, Workload
from producers.simulator.faults import (
    FAULT_KINDS,
    Fault,
    InjectedFault,
    SlowRank,
    SlowSteps,
    StepState,
    data_stall,
    gc_pause,
)
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.run import run_simulation
from producers.simulator.topology import Coords, Topology

__all__ = [
    "DEFAULT_START_NS", "FAULT_KINDS", "Coords", "Fault", "GroundTruth", "InjectedFault", "SimStep",
    "SimulatedJob", "SlowRank", "SlowSteps", "StepState", "Timings", "Topology", "Workload",
    "data_stall", "gc_pause", "run_simulation",
]
