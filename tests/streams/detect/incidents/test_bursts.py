"""A rank slow in bursts (bursty_rank: compute x1.3 for 5 steps every 25) is one incident recording
each burst, its slow steps joined to it: the simulator's job through decode and the engine, scored
with the bench's own scorer."""

from __future__ import annotations

from typing import Any

import orjson

from bench.detection.run import run_record, score_records
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics, bounded, encode
from tests.streams.helpers import feed_engine


def _replay(run: SimRun) -> list[dict[str, Any]]:
    raws: list[bytes] = []
    stream_runs([run], Topics(""), lambda topic, key, value: raws.append(value))
    out = feed_engine([raws], behind=(0, 0), drain_ticks=100)
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
