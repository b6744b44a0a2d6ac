"""Periodic work is the job's rhythm (issue #45, class 4): an asynchronous checkpoint whose write slows the next
steps by ~12 % opened a SLOW_STEP incident (with R3/R10) on every checkpoint; a checkpoint that becomes much
slower than its own past is one incident from the first slow one, whatever the stage or culprit scopes say."""

from __future__ import annotations

import pytest

from producers.simulator.catalogue import scenario_job
from tests.streams.helpers import incidents, run_engine


@pytest.mark.parametrize(("scenario", "seed"), [("healthy_checkpoint_async", 0), ("healthy_checkpoint_eval", 1)])
def test_a_periodic_checkpoint_and_evaluation_raise_nothing(scenario: str, seed: int) -> None:
    found = incidents(run_engine(scenario_job(scenario, ranks=64, steps=120, seed=seed)))
    assert not found, sorted({(i.rule, i.step_first, i.summary[:80]) for i in found})


@pytest.mark.parametrize(("scenario", "seed"), [("checkpoint_degrades", 1), ("checkpoint_degrades_sync", 0)])
def test_a_checkpoint_slower_than_its_past_is_one_job_incident_from_the_first_slow_one(scenario: str,
                                                                                       seed: int) -> None:
    job = scenario_job(scenario, ranks=64, steps=120, seed=seed)
    found = incidents(run_engine(job))
    assert len({i.incident_id for i in found}) == 1, sorted({(i.incident_id, i.rule, i.step_first) for i in found})
    last = found[-1]
    assert last.scope == "job" and last.rule == "SLOW_STEP", last
    assert last.step_first <= job.faults[0].start + 1, last.step_first
    assert "periodic work" in (last.cause or ""), last.cause
