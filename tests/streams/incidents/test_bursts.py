"""A rank slow in bursts (bursty_rank: compute x1.3 for 5 steps every 25) is one incident recording
each burst, its slow steps joined to it: the simulator's job through decode and the engine, scored
with the bench's own scorer."""

from __future__ import annotations

from typing import Any

import orjson

from bench.detection.run import run_record, score_records
from infra.settings import DetectionConfig
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics, bounded, encode
from streams.combine import chunks as codec
from streams.engine import FleetEngine
from streams.ingest.decode import decode_batch
from tests.streams.helpers import T0


def _replay(run: SimRun) -> list[dict[str, Any]]:
    fleet, raws, out, now = FleetEngine(DetectionConfig()), [], [], T0
    stream_runs([run], Topics(""), lambda topic, key, value: raws.append(value))
    for i in range(0, len(raws), 2048):
        chunks, _ = decode_batch(raws[i:i + 2048], 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 0, 0
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        now += 50_000_000
        out.extend(fleet.tick(now))
    for _ in range(100):
        now += 500_000_000
        out.extend(fleet.tick(now))
    return [orjson.loads(encode(bounded(o))) for o in out if isinstance(o, Incident)]


def test_bursts_of_one_rank_are_one_incident() -> None:
    run = SimRun(scenario_job("bursty_rank", ranks=64, steps=100, seed=0, job_id="bursts"))
    messages = _replay(run)
    scores = score_records([run_record("bursty_rank", run)], messages)["scenarios"]["bursty_rank"]
    assert scores["incidents"] == 1 and scores["false_alarms"] == 0, scores  # not one per burst, no slow-step one
    assert scores["localisation"] == scores["rule_attribution"] == 1.0, scores
    last = messages[-1]
    assert last["rule"] == "SLOW_RANK" and last["evidence"]["bursts"] == 4.0
    assert [last["evidence"][f"burst_{n}_step"] for n in (2, 3, 4)] == [45.0, 70.0, 95.0]
