"""A job that finishes in a tick without an output still gets its final snapshot (streams/detect/app.py
`newly_finished`): a relaunched job whose replaced attempt closes clean finished silently and was
evicted with an unfinished snapshot on the state topic (`make bench-detection`: 9 such jobs)."""

from __future__ import annotations

from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from streams.detect.app import newly_finished
from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from tests.streams.helpers import run_launches


def test_only_jobs_that_finished_now_are_new() -> None:
    done, running, old = (JobEngine.create(j, DetectionConfig()) for j in ("done", "running", "old"))
    done.finished = old.finished = True
    assert newly_finished({"old"}, {"done": done, "running": running, "old": old}) == {"done"}


def test_a_clean_relaunch_finishes_without_an_output() -> None:
    """The case the worker must snapshot: no incident at all, yet the job ends (in a tick)."""
    first = FleetJob("quiet", Topology(dp=4, tp=2, pp=2), steps=40, seed=1)
    second = FleetJob("quiet", Topology(dp=4, tp=2, pp=2), steps=80, seed=2, attempt=1, first_step=30,
                          start_ns=first.end_ns() + 10 * 10**9)
    out = run_launches([(first, False), (second, True)], gap_s=10.0)
    assert not out
