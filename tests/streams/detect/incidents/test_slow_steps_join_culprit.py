"""A straggler's slow steps are its incident, however long after its onset they come (issue #45 class 5).

Slow steps never enter the step-time baseline, so a straggler keeps every step slow against the baseline from
before it; a slow step that persisted long after the straggler's onset opened a second, job-scope SLOW_STEP
incident beside the right SLOW_RANK on a 16-rank job (2 hosts, TP4 PP2 DP2). Run through decode and the engine
in process, scored with the bench's scorer.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bench.detection.run import run_record, score_records
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics, bounded, encode
from tests.streams.helpers import feed_engine


def _scored(name: str, ranks: int, seed: int) -> dict[str, Any]:
    run = SimRun(scenario_job(name, ranks=ranks, steps=120, seed=seed, job_id=f"{name}-{ranks}-{seed}"))
    raws: list[bytes] = []
    stream_runs([run], Topics(""), lambda t, k, v: raws.append(v))
    out = feed_engine([raws], behind=None, drain_ticks=40)
    messages = [orjson.loads(encode(bounded(o))) for o in out if isinstance(o, Incident)]
    return dict(score_records([run_record(name, run)], messages)["scenarios"][name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stragglers_late_slow_steps_join_its_incident(seed: int) -> None:
    row = _scored("slow_rank", 16, seed)
    assert row["recall"] == row["localisation"] == row["precision"] == 1.0, row
    assert row["incidents_per_fault"] == 1.0, row
