"""GroundTruth: what a detector must find, from catalogue FaultSpecs, and a JSONL round trip."""

from __future__ import annotations

import json
from pathlib import Path

from producers.simulator.catalogue import FaultSpec, data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.ground_truth import GroundTruth, read_ground_truth
from producers.simulator.topology import Topology

TOPO = Topology(dp=4, tp=2, pp=2)


def job() -> FleetJob:
    return FleetJob("job-gt", TOPO, 50, [
        straggler(TOPO, 9, 1.3),
        straggler(TOPO, 3, 1.2, start=20, end=200),
        *gc_pauses(TOPO, [10, 11], 150.0),
        *data_stalls(TOPO, [40], 300.0, ranks=[5]),
        FaultSpec(kind="early_stream_sync", scope="job", start=48, end=70, ranks=tuple(range(TOPO.world)),
                  magnitude={"sync_ms": 100.0}, rules=("SLOW_STEP",), row="checkpoint sync"),
        FaultSpec(kind="cooling_loss", scope="rank", start=30, end=35, ranks=(7,), rules=("R1", "R2")),
    ], 11)


def test_sets_a_detector_must_find() -> None:
    truth = job().ground_truth()
    assert truth.slow_ranks() == {9, 3}
    # steps 50-70 are past the run; slow ranks make no slow steps; R1/R2 alone ask for neither
    assert truth.slow_steps() == {10, 11, 40, 48, 49}
    assert truth.slow_rank_steps() == {9: set(range(50)), 3: set(range(20, 50))}
    kinds = [(f["kind"], f["scope"], f["ranks"], f["end_step"]) for f in truth.faults]
    assert kinds == [("slow_compute", "rank", [9], 49), ("slow_compute", "rank", [3], 49),
                     ("gc_leak", "job", list(range(16)), 11), ("slow_data_loader", "rank", [5], 40),
                     ("early_stream_sync", "job", list(range(16)), 49), ("cooling_loss", "rank", [7], 35)]
    assert {(f["job"], f["seed"]) for f in truth.faults} == {("job-gt", 11)}


def test_jsonl_round_trip(tmp_path: Path) -> None:
    truth = job().ground_truth()
    path = truth.write(tmp_path / "run" / "ground_truth.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == truth.faults == read_ground_truth(path)
    assert GroundTruth.load(path, "job-gt", 11, 50) == truth
    assert not list(path.parent.glob("*.tmp"))


def test_a_healthy_run_has_an_empty_file(tmp_path: Path) -> None:
    truth = FleetJob("ok", TOPO, 10).ground_truth()
    path = truth.write(tmp_path / "gt.jsonl")
    assert path.read_bytes() == b"" and truth.slow_ranks() == set() == truth.slow_steps()
