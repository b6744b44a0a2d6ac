"""Deterministic cluster simulators with injected, known faults.

`FleetJob` (fleet.py) is the fleet simulator: 8 to 10,240+ ranks, a Llama-style model, step,
kernel_summary and device events, every fault of the catalogue (catalogue.py) with JSONL
ground truth. `SimulatedJob` (cluster.py) is the classic step-only simulator the demo uses.
"""

from producers.simulator.catalogue import SCENARIOS, FaultSpec, Scenario, build_faults, layout, write_ground_truth
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
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.model import Hardware, ModelConfig
from producers.simulator.run import run_simulation
from producers.simulator.topology import Coords, Topology

__all__ = [
    "DEFAULT_START_NS",
    "FAULT_KINDS",
    "SCENARIOS",
    "Coords",
    "Fault",
    "FaultSpec",
    "FleetJob",
    "GroundTruth",
    "Hardware",
    "InjectedFault",
    "ModelConfig",
    "Noise",
    "Scenario",
    "SimStep",
    "SimulatedJob",
    "SlowRank",
    "SlowSteps",
    "StepState",
    "Timings",
    "Topology",
    "Workload",
    "build_faults",
    "data_stall",
    "gc_pause",
    "layout",
    "run_simulation",
    "write_ground_truth",
]
