"""SimulatedJob: deterministic, contract-valid, and faults show up where the ground truth says."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from producers.simulator.cluster import SimulatedJob
from producers.simulator.faults import SlowRank, SlowSteps, data_stall, gc_pause
from producers.simulator.topology import Topology
from schemas import StepEvent, decode, encode

TOPO = Topology(dp=4, tp=4, pp=4)
SLOW = 21
GC_STEPS = (30, 31)
STALL_STEPS = (60,)


def faulty_job(seed: int = 7, steps: int = 80) -> SimulatedJob:
    return SimulatedJob("job-sim", TOPO, steps, [
        SlowRank(rank=SLOW, factor=1.25),
        gc_pause(GC_STEPS, extra_ms=150.0),
        data_stall(STALL_STEPS, extra_ms=200.0, ranks=[SLOW]),
    ], seed=seed)


@pytest.fixture(scope="module")
def steps() -> list[list[StepEvent]]:
    return list(faulty_job().iter_steps())


def busy(ev: StepEvent) -> float:
    p = ev.phases
    return sum(v or 0.0 for v in (p.data_ms, p.forward_ms, p.backward_ms, p.optimizer_ms, p.gc_ms, p.interstep_cpu_ms))


def test_deterministic_for_a_seed() -> None:
    a = [encode(e) for s in faulty_job(seed=3, steps=5).iter_steps() for e in s]
    b = [encode(e) for s in faulty_job(seed=3, steps=5).iter_steps() for e in s]
    c = [encode(e) for s in faulty_job(seed=4, steps=5).iter_steps() for e in s]
    assert a == b and a != c


def test_events_are_contract_valid_and_complete(steps: list[list[StepEvent]]) -> None:
    assert len(steps) == 80 and all(len(s) == TOPO.world for s in steps)
    for step_events in (steps[0], steps[GC_STEPS[0]]):
        for ev in step_events:
            assert decode(encode(ev)) == ev
            assert ev.tokens == 8 * 4096 and ev.batch_size == 1 and ev.samples == 8
            assert ev.flops and ev.peak_flops and 0.05 < ev.flops / (ev.duration_ms / 1e3) / ev.peak_flops < 0.6
    assert [s[0].step for s in steps] == list(range(80))


def test_timing_model_is_synchronous(steps: list[list[StepEvent]]) -> None:
    for prev, cur in itertools.pairwise(steps):
        assert cur[0].start_ns == prev[0].end_ns  # next step starts when the collective ends
    for step_events in steps:
        assert len({(e.start_ns, e.end_ns) for e in step_events}) == 1
        for ev in step_events:  # phases add up to the step, waiting included
            assert busy(ev) + (ev.phases.comm_exposed_ms or 0) == pytest.approx(ev.duration_ms, abs=1e-3)


def test_slow_rank_is_the_one_the_others_wait_for(steps: list[list[StepEvent]]) -> None:
    doms = TOPO.domains(SLOW)
    for step_events in steps:
        for name in ("dp", "tp", "pp"):
            peers = [e for e in step_events if e.domains[name].group == doms[name].group]
            assert len(peers) == getattr(TOPO, name)
            assert max(peers, key=busy).rank == SLOW
            assert min(peers, key=lambda e: e.phases.comm_exposed_ms or 0).rank == SLOW


def test_slow_steps_stand_out_and_the_rest_do_not(steps: list[list[StepEvent]]) -> None:
    durations = [s[0].duration_ms for s in steps]
    median = statistics.median(durations)
    faulty = set(GC_STEPS) | set(STALL_STEPS)
    for i, d in enumerate(durations):
        if i in faulty:
            assert d > 1.1 * median, (i, d, median)
        else:
            assert abs(d / median - 1) < 0.04, (i, d, median)


def test_gc_fault_sets_gc_fields(steps: list[list[StepEvent]]) -> None:
    for ev in steps[GC_STEPS[0]]:
        assert ev.gc_count == 1 and ev.phases.gc_ms == pytest.approx(150.0)
    assert all(ev.gc_count == 0 for ev in steps[0])


def test_slow_rank_window_and_per_rank_pause() -> None:
    job = SimulatedJob("j", Topology(dp=2, tp=2, pp=1), 20, [
        SlowRank(rank=1, factor=1.5, first_step=10, last_step=14),
        SlowSteps(steps=(3,), phase="gc_ms", extra_ms=300.0, ranks=(2,), cause="gc_pause"),
    ], seed=1)
    arrays = list(job.iter_arrays())
    for sim in arrays:
        slowest = int(np.argmax(sim.busy_ms))
        if 10 <= sim.step <= 14:
            assert slowest == 1
        elif sim.step == 3:
            assert slowest == 2 and sim.gc_count.tolist() == [0, 0, 1, 0]
    d = job.step_durations_ms()
    assert d[3] > 1.4 * d[2] and d[10] > 1.2 * d[9]


def test_job_events() -> None:
    job = faulty_job(steps=10)
    start, end = job.job_events()
    assert start.phase == "start" and end.phase == "end"
    assert start.parallel == {"dp": 4, "tp": 4, "pp": 4} and start.world == 64
    assert end.last_step == 9 and end.ts_ns == list(job.iter_steps())[-1][0].end_ns
    assert decode(encode(end)) == end


def test_invalid_faults_are_rejected() -> None:
    with pytest.raises(ValueError):
        SimulatedJob("j", TOPO, 5, [SlowRank(rank=64, factor=2.0)])
    with pytest.raises(ValueError):
        SlowSteps(steps=(1,), phase="comm_exposed_ms", extra_ms=5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SlowRank(rank=0, factor=1.2, first_step=5, last_step=2)
