"""Deterministic cluster simulators with injected, known faults.

`FleetJob` (fleet.py) is the one simulator: 2 to 10,240+ ranks, a Llama-style model, step,
kernel_summary and device events (or typed StepEvents, `iter_steps`), every fault of the
catalogue (catalogue.py, hand-placed ones through `straggler`, `gc_pauses`, `data_stalls`)
with JSONL ground truth. `Noise.quiet()` turns the healthy warm-up, checkpoints, evaluation,
hiccups and GC pauses off where a test needs plain, countable steps.
"""

from producers.simulator.catalogue import (
    SCENARIOS,
    FaultSpec,
    Scenario,
    build_faults,
    data_stalls,
    gc_pauses,
    layout,
    scenario_job,
    straggler,
)
from producers.simulator.fleet import DEFAULT_START_NS, FleetJob, Noise
from producers.simulator.ground_truth import GroundTruth, write_ground_truth
from producers.simulator.model import Hardware, ModelConfig
from producers.simulator.run import run_simulation
from producers.simulator.topology import Coords, Topology

__all__ = [
    "DEFAULT_START_NS",
    "SCENARIOS",
    "Coords",
    "FaultSpec",
    "FleetJob",
    "GroundTruth",
    "Hardware",
    "ModelConfig",
    "Noise",
    "Scenario",
    "Topology",
    "build_faults",
    "data_stalls",
    "gc_pauses",
    "layout",
    "run_simulation",
    "scenario_job",
    "straggler",
    "write_ground_truth",
]
