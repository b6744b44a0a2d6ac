"""The job's measured slowdown around an incident: from its step times (pure) and from the history in
ClickHouse (`steps_by_step`, embedded chdb), as the mitigation worker reads it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from schemas import Incident
from sinks.embedded import EmbeddedBackend
from streams.mitigate.pace import JobPace
from streams.mitigate.policy import measured_slowdown
from tests.steplens.fleet_data import SLOW_STEPS, load


def test_the_steps_of_the_incident_against_the_steps_before_it() -> None:
    pace = [(s, 100.0) for s in range(10)] + [(s, 125.0) for s in range(10, 20)]
    assert measured_slowdown(pace, 10, 19) == pytest.approx(0.2)
    assert measured_slowdown(pace, 10, None) == pytest.approx(0.2)
    assert measured_slowdown(pace, 1, 19) is None  # a job slow from its start has no before: the incident's figures
    assert measured_slowdown(pace, 18, 19) is None  # two steps are no pace
    assert measured_slowdown(pace, None, None) is None


def test_an_intermittent_fault_costs_the_job_every_slow_step_it_pays() -> None:
    """Throttled 3 steps in 8 by a third (a power brown-out's rhythm): the job pays the mean, ~11 %, though
    the median step of the window is a healthy one."""
    pace = [(s, 100.0) for s in range(20)] + [(s, 133.0 if s % 8 >= 5 else 100.0) for s in range(20, 84)]
    assert measured_slowdown(pace, 20, 83) == pytest.approx(1 - 100 / (100 + 33 * 3 / 8), abs=1e-6)


@pytest.mark.clickhouse
def test_the_worker_reads_the_jobs_pace_from_the_history(tmp_path: Path) -> None:
    backend = EmbeddedBackend(tmp_path / "chdb", "steplens")
    try:
        load(backend)  # job-a: steps 20-22 at 1.6x, its straggler 1.3x the others throughout
        pace = JobPace(lambda: backend)
        incident = Incident(incident_id="i", job="job-a", rule="SLOW_STEP", state="open", severity="warning",
                            scope="job", summary="slow steps", detected_ns=0, step_first=SLOW_STEPS[0],
                            step_last=SLOW_STEPS[-1])
        assert pace.slowdown(incident) == pytest.approx(1 - 655.0 / 1045.0, abs=0.01)
        assert pace.slowdown(replace(incident, job="no-such-job")) is None
        assert pace.failures == 0
    finally:
        backend.close()

