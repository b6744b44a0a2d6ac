"""GroundTruth: what a detector must find, and a JSON round trip."""

from __future__ import annotations

from pathlib import Path

from producers.simulator.cluster import SimulatedJob
from producers.simulator.faults import SlowRank, SlowSteps, data_stall, gc_pause
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.topology import Topology


def job() -> SimulatedJob:
    return SimulatedJob("job-gt", Topology(dp=4, tp=2, pp=2), 50, [
        SlowRank(rank=9, factor=1.3),
        SlowRank(rank=3, factor=1.2, first_step=20, last_step=200),
        gc_pause([10, 11], 150.0),
        data_stall([40], 300.0, ranks=[5]),
        SlowSteps(steps=(48, 49, 70), phase="optimizer_ms", extra_ms=100.0, cause="checkpoint"),
    ], seed=11)


def test_sets_a_detector_must_find() -> None:
    truth = job().ground_truth()
    assert truth.slow_ranks() == {9, 3}
    assert truth.slow_steps() == {10, 11, 40, 48, 49}  # step 70 is past the run; slow ranks make no slow steps
    assert truth.slow_rank_steps()[3] == set(range(20, 50))
    kinds = [(f.kind, f.cause, f.ranks) for f in truth.faults]
    assert kinds == [("slow_rank", "slow_device", [9]), ("slow_rank", "slow_device", [3]),
                     ("slow_steps", "gc_pause", None), ("slow_steps", "data_stall", [5]),
                     ("slow_steps", "checkpoint", None)]


def test_round_trip(tmp_path: Path) -> None:
    truth = job().ground_truth()
    path = truth.write(tmp_path / "run" / "ground_truth.json")
    loaded = GroundTruth.load(path)
    assert loaded == truth
    assert loaded.topology == {"dp": 4, "tp": 2, "pp": 2, "ep": 1, "cp": 1, "devices_per_host": 8}
    assert not list(path.parent.glob("*.tmp"))
