"""A job's incidents carry its checkpoint period once its rhythm shows one (streams/detect/engine.py
`_with_checkpoints`): what a relaunch would lose, which the mitigation worker weighs (streams/mitigate/book.py)
instead of assuming a period. Simulated job through decode and the engine in process."""

from __future__ import annotations

from dataclasses import replace

from producers.simulator.catalogue import SCENARIOS, build_faults
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics
from tests.streams.helpers import feed_engine


def _incidents(checkpoint_every: int) -> list[Incident]:
    sc = SCENARIOS["slow_host"]
    topo = sc.topology(32)
    job = FleetJob("slow-host-checkpoints", topo, 120, build_faults(sc, topo, 120, 1), 1, model=sc.model(topo),
                   noise=replace(sc.noise() or Noise(), checkpoint_every=checkpoint_every, checkpoint_ms=1500.0))
    raws: list[bytes] = []
    stream_runs([SimRun(job)], Topics(""), lambda t, k, v: raws.append(v))
    return [o for o in feed_engine([raws], behind=None, drain_ticks=40) if isinstance(o, Incident)]


def test_a_culprits_incident_carries_the_jobs_checkpoint_period_once_its_rhythm_shows() -> None:
    hosts = [i for i in _incidents(12) if i.scope == "host" and i.state != "resolved"]
    assert hosts, "the slow host is found"
    every = [i.evidence.get("checkpoint_every_steps") for i in hosts]
    assert every[-1] == 12.0, every
    step_ms = hosts[-1].evidence["baseline_step_ms"]
    assert 200 < step_ms < 5000  # the job's healthy pace, not a checkpoint's step


def test_a_job_without_a_checkpoint_rhythm_says_nothing_of_one() -> None:
    hosts = [i for i in _incidents(0) if i.scope == "host"]
    assert hosts and not any("checkpoint_every_steps" in i.evidence for i in hosts)
