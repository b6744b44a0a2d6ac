"""run_simulation: the whole FleetJob goes through the emitter, lifecycle events around the steps."""

from __future__ import annotations

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.simulator.catalogue import FaultSpec, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.run import run_simulation
from producers.simulator.topology import Topology
from schemas import JobEvent, StepEvent, Topics, decode


def test_run_simulation_emits_everything_in_order() -> None:
    topo = Topology(dp=4, tp=2, pp=2)
    job = FleetJob("job-run", topo, 40, [straggler(topo, 3, 1.2)], 2)
    exporter = InMemoryExporter()
    # A queue smaller than the job: pacing must prevent queue_full drops.
    emitter = BackgroundEmitter(exporter, Topics("r."), max_queue=100, batch_size=32, flush_interval_s=0.01)
    stats = run_simulation(job, emitter)
    assert emitter.close(timeout=10)
    assert stats.emitted == stats.exported == 16 * 40 + 2 and stats.dropped == {}
    events = [decode(r.value) for r in exporter.records]
    assert isinstance(events[0], JobEvent) and events[0].phase == "start"
    assert isinstance(events[-1], JobEvent) and events[-1].phase == "end" and events[-1].last_step == 39
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert [(e.step, e.rank) for e in steps] == [(s, r) for s in range(40) for r in range(16)]
    assert {r.topic for r in exporter.records} == {"r.jobs", "r.steps"}


def test_a_crashed_launch_sends_no_end() -> None:
    topo = Topology(dp=2, tp=2, pp=1)
    crash = FaultSpec(kind="job_crash", scope="job", start=6, end=6, ranks=tuple(range(topo.world)))
    exporter = InMemoryExporter()
    emitter = BackgroundEmitter(exporter, Topics("r."), flush_interval_s=0.01)
    stats = run_simulation(FleetJob("crashy", topo, 10, [crash], 1), emitter)
    assert emitter.close(timeout=10)
    events = [decode(r.value) for r in exporter.records]
    assert stats.emitted == 4 * 6 + 1 and [e.phase for e in events if isinstance(e, JobEvent)] == ["start"]
    assert max(e.step for e in events if isinstance(e, StepEvent)) == 5
