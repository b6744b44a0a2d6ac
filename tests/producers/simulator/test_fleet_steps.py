"""FleetJob as typed step events: deterministic, contract-valid, and hand-placed catalogue faults
(catalogue.straggler, gc_pauses, data_stalls) show up where their specs say."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from producers.simulator.catalogue import FaultSpec, data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology
from schemas import StepEvent, decode, decode_as, encode

TOPO = Topology(dp=4, tp=4, pp=4)
SLOW = 21
GC_STEPS = (30, 31)
STALL_STEPS = (60,)
GC_MS, STALL_MS = 600.0, 800.0


def faulty_job(seed: int = 7, steps: int = 80, noise: Noise | None = None) -> FleetJob:
    return FleetJob("job-sim", TOPO, steps, [
        straggler(TOPO, SLOW, 1.25),
        *gc_pauses(TOPO, GC_STEPS, GC_MS),
        *data_stalls(TOPO, STALL_STEPS, STALL_MS, ranks=[SLOW]),
    ], seed, noise=noise or Noise.quiet())


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
    job = faulty_job()
    assert len(steps) == 80 and all(len(s) == TOPO.world for s in steps)
    for step_events in (steps[0], steps[GC_STEPS[0]]):
        assert [e.rank for e in step_events] == list(range(TOPO.world))
        for ev in step_events:
            assert decode(encode(ev)) == ev
            assert ev.batch_size == job.model.micro_batch
            assert ev.samples == job.model.micro_batch * job.model.microbatches
            assert ev.tokens and 0.8 * ev.samples * job.model.seq <= ev.tokens <= 1.2 * ev.samples * job.model.seq
            assert ev.flops and ev.peak_flops and 0.05 < ev.flops / (ev.duration_ms / 1e3) / ev.peak_flops < 0.8
    assert [s[0].step for s in steps] == list(range(80))


def test_timing_model_is_synchronous(steps: list[list[StepEvent]]) -> None:
    """Each host's clock has its own offset (the clock_offset trait), so compare ranks of one host."""
    host0 = [s[0] for s in steps]
    for prev, cur in itertools.pairwise(host0):
        assert cur.start_ns == prev.end_ns  # the next step starts when the collective ends
    for step_events in steps:
        assert len({e.end_ns - e.start_ns for e in step_events}) == 1  # every rank's step is as long
        for ev in step_events:  # phases add up to the step, waiting included
            assert busy(ev) + (ev.phases.comm_exposed_ms or 0) == pytest.approx(ev.duration_ms, abs=0.01)


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
            assert d > 1.3 * median, (i, d, median)
        else:
            assert abs(d / median - 1) < 0.1, (i, d, median)


def test_gc_fault_sets_gc_fields(steps: list[list[StepEvent]]) -> None:
    """Every step runs the collector's cheap young-generation pass once; a pause is one more, and long."""
    for ev in steps[GC_STEPS[0]]:
        assert ev.gc_count == 2 and GC_MS < (ev.phases.gc_ms or 0) < GC_MS + 5
    assert all(ev.gc_count == 1 and (ev.phases.gc_ms or 0) < 5 for ev in steps[0])


def test_slow_rank_window_and_per_rank_pause() -> None:
    topo = Topology(dp=2, tp=2, pp=1)
    probe = FleetJob("j", topo, 20, noise=Noise.quiet())
    job = FleetJob("j", topo, 20, [straggler(topo, 1, 1.5, start=10, end=14),
                                   *gc_pauses(topo, (3,), 0.5 * probe.nominal_ms, ranks=(2,))], 1, noise=Noise.quiet())
    for frame in job.iter_frames():
        slowest = int(np.argmax(frame.busy_ms))
        if 10 <= frame.step <= 14:
            assert slowest == 1
        elif frame.step == 3:
            assert slowest == 2 and frame.gc_count.tolist() == [1, 1, 2, 1]
    d = job.step_durations_ms()
    assert d[3] > 1.4 * d[2] and d[10] > 1.2 * d[9] and d[15] < 0.9 * d[14]


def test_quiet_noise_has_no_warm_up_checkpoint_or_eval_steps() -> None:
    """The default is realistic (warm-up, a checkpoint every 100 steps, evaluation every 50); quiet is not."""
    topo = Topology(dp=2, tp=2, pp=1)
    real = FleetJob("j", topo, 101, seed=2).step_durations_ms()
    quiet = FleetJob("j", topo, 101, seed=2, noise=Noise.quiet()).step_durations_ms()
    assert real[0] > 2 * statistics.median(real) and real[100] > 1.1 * statistics.median(real)
    assert max(quiet) < 1.1 * statistics.median(quiet) and min(quiet) > 0.9 * statistics.median(quiet)


def test_job_events() -> None:
    job = faulty_job(steps=10)
    start, end = job.job_events()
    assert start.phase == "start" and end.phase == "end" and start.kernel_summaries is None
    assert start.parallel == {"dp": 4, "tp": 4, "pp": 4} and start.world == 64 and start.model == job.model.name
    assert end.last_step == 9 and end.ts_ns == job.end_ns() == list(job.iter_frames())[-1].end_ns
    assert decode(encode(end)) == end


def test_a_relaunch_runs_from_its_first_step_under_its_attempt() -> None:
    job = FleetJob("j", Topology(dp=2, tp=2, pp=1), 12, seed=1, attempt=1, first_step=8, noise=Noise.quiet())
    steps = list(job.iter_steps())
    assert [s[0].step for s in steps] == [8, 9, 10, 11] and {e.attempt for s in steps for e in s} == {1}
    start, end = job.job_events()
    assert start.attempt == end.attempt == 1 and end.last_step == 11


def test_hand_placed_specs_are_catalogue_specs() -> None:
    """One spec per run of consecutive steps; every rank: a job-wide slow step, some ranks: scoped to them."""
    gc = gc_pauses(TOPO, (5, 6, 9), 300.0)
    assert [(f.kind, f.scope, f.start, f.end, f.rules) for f in gc] == [
        ("gc_leak", "job", 5, 6, ("SLOW_STEP",)), ("gc_leak", "job", 9, 9, ("SLOW_STEP",))]
    assert gc[0].ranks == tuple(range(TOPO.world)) and gc[0].magnitude["every_steps"] == 1
    stall = data_stalls(TOPO, (7,), 200.0, ranks=(9, 3))
    assert [(f.kind, f.scope, f.ranks, f.hosts) for f in stall] == [
        ("slow_data_loader", "rank", (3, 9), ("node-0", "node-1"))]
    slow = straggler(TOPO, SLOW, 1.3, start=4)
    assert (slow.kind, slow.ranks, slow.hosts, slow.end, slow.rules) == ("slow_compute", (SLOW,), ("node-2",), None,
                                                                          ("SLOW_RANK", "R4"))


def test_invalid_faults_are_rejected() -> None:
    with pytest.raises(ValueError):
        FleetJob("j", TOPO, 5, [straggler(TOPO, 64, 2.0)])
    with pytest.raises(ValueError):
        FleetJob("j", TOPO, 5, [FaultSpec(kind="no_such_kind", scope="job", start=0)])
    with pytest.raises(ValueError):
        FleetJob("j", TOPO, 5, [straggler(TOPO, 0, 1.2, start=5, end=2)])
    with pytest.raises(ValueError):
        straggler(TOPO, 0, 0.0)
    with pytest.raises(ValueError):
        gc_pauses(TOPO, (-1,), 100.0)
    with pytest.raises(ValueError):
        data_stalls(TOPO, (1,), 0.0)


def test_typed_step_events_are_the_wire_events() -> None:
    """iter_steps builds StepEvents without a JSON round trip: they decode from the stream's bytes as they are."""
    from producers.simulator.events import FrameEncoder

    job = FleetJob("j", Topology(dp=2, tp=2, pp=2), 8, [straggler(Topology(dp=2, tp=2, pp=2), 3, 1.3, attempt=2)], 5,
                   attempt=2, first_step=3)
    encoder = FrameEncoder(job, ("step",))
    wire = [[decode_as(StepEvent, ev.value) for ev in encoder.encode(f)] for f in job.iter_frames() if f.completed]
    assert list(job.iter_steps()) == wire and wire[0][0].attempt == 2
