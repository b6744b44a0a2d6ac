"""Expected step time: Algorithm 1's synchronisation on hand-built ranks, the live composition, a real trace."""

from __future__ import annotations

import numpy as np

from streams.model.collectives import fit_curve
from streams.model.kernels import KernelFlops, fit_kernel_bench
from streams.model.reference import ReferenceModels
from streams.model.step_time import (
    RankTasks,
    SummaryStep,
    expected_max_z,
    fit_durations,
    held_out_predictions,
    predict_summary_step,
    predict_trace,
    rank_tasks,
    simulate,
)
from streams.profiles.importers.ascend_pt import parse_ascend
from streams.profiles.model import COMMUNICATION, COMPUTE, Step
from streams.profiles.samples import real_samples_dir

REAL = real_samples_dir()
CP, CM = 7, 20  # compute and communication streams


def _rank(rank: int, rows: list[tuple[float, float, int, int, str]]) -> RankTasks:
    """rows: (start µs, duration µs, stream, collective id or -1, name); one step, no launch times."""
    n = len(rows)
    return RankTasks(
        rank=rank, ts=np.array([r[0] for r in rows]), dur=np.array([r[1] for r in rows]), launch=np.full(n, np.nan),
        stream=np.array([r[2] for r in rows], dtype=np.int32),
        kind=np.array([COMMUNICATION if r[2] == CM else COMPUTE for r in rows], dtype=np.int8),
        step=np.zeros(n, dtype=np.int64), name=[r[4] for r in rows], nbytes=np.full(n, np.nan),
        coll=np.array([r[3] for r in rows], dtype=np.int64), syncs=np.zeros((0, 2)), steps=[Step(0, 0.0, 1.0)])


def _two_ranks() -> list[RankTasks]:
    # rank 1 computes 30 µs before the all-reduce, rank 0 10 µs: rank 0 waits 20 µs in it (transfer 5 µs),
    # then both run the kernel that needs the all-reduce's result
    r0 = _rank(0, [(0, 10, CP, -1, "A"), (10, 25, CM, 0, "allreduce"), (35, 10, CP, -1, "B")])
    r1 = _rank(1, [(0, 30, CP, -1, "A"), (30, 5, CM, 0, "allreduce"), (35, 10, CP, -1, "B")])
    return [r0, r1]


def test_late_rank_delays_the_collective_end_on_both_ranks() -> None:
    tasks = _two_ranks()
    dur = [np.array([10.0, 5.0, 10.0]), np.array([30.0, 5.0, 10.0])]  # expected: transfer 5 µs
    sched = simulate(tasks, dur)
    assert sched.end[0][1] == sched.end[1][1] == 35.0  # inter-rank sync: rank 1's late start + transfer
    assert sched.start[0][2] == 35.0 and sched.end[0][2] == 45.0  # intra-rank: B waits for the all-reduce
    # the late rank made faster: the collective and the step end earlier on BOTH ranks
    fast = simulate(tasks, [dur[0], np.array([12.0, 5.0, 10.0])])
    assert fast.end[0][1] == fast.end[1][1] == 17.0 and fast.end[0][2] == 27.0


def test_max_of_stream_sums_underestimates() -> None:
    tasks = _two_ranks()
    dur = [np.array([10.0, 5.0, 10.0]), np.array([30.0, 5.0, 10.0])]
    how = [np.full(3, 2, dtype=np.int8)] * 2
    preds = predict_trace(tasks, dur, how)
    assert {p.rank: p.expected.step_ms for p in preds} == {0: 0.045, 1: 0.045}
    assert all(p.baseline_ms < p.expected.step_ms for p in preds)  # 0.020 and 0.040 ms: no waits counted
    assert max(p.baseline_ms for p in preds) < 0.045


def test_durations_held_out_by_call() -> None:
    r0, r1 = _two_ranks()
    model = fit_durations([(r1, np.ones(3, dtype=bool))], "rank 1")
    d, how = model.predict(r0)
    assert d.tolist() == [30.0, 5.0, 10.0] and how.tolist() == [3, 3, 3]
    assert model.fitted_on == "rank 1"


def _summary(flops: float, busy_ms: list[float], comm_bytes: float, step_ms: float) -> SummaryStep:
    world = len(busy_ms)
    ranks = np.repeat(np.arange(world), 2)
    return SummaryStep(
        device_kind="nvidia-h100", step_ms=step_ms, busy_ms=np.array(busy_ms), host_ms=np.full(world, 1.0),
        rank=ranks, key=["F2:1x1x1", "allreduce/dp"] * world, cat=["compute", "comm"] * world,
        count=np.tile([10.0, 4.0], world), total_ns=np.tile([20e6, 8e6], world),
        flops=np.tile([flops, 0.0], world), nbytes=np.tile([0.0, comm_bytes], world),
        op=[None, "allreduce"] * world, link=[None, "inter"] * world,
        group_size=np.tile([0, world], world).astype(np.int64), in_phase=np.tile([True, False], world),
        transfer_ns=np.tile([np.nan, 8e6], world))


def test_live_step_composition() -> None:
    sizes = np.geomspace(1e6, 1e9, 12)
    curve = fit_curve("allreduce", "inter", 2, sizes, 20e3 + sizes / 10.0)  # 10 GB/s
    bench = fit_kernel_bench([KernelFlops("j", "F2:1x1x1", "nvidia-h100", 500e12)])
    models = ReferenceModels(curves=(curve,), kernels=bench)
    # observed: 20 ms of compute per rank at 10e12 FLOPs -> expected 10e12 / 500e12 = 20 ms; the
    # all-reduce's 4 calls of 20 MB: expected 4 x (20 µs + 2 ms) = 8.08 ms, observed 8 ms
    s = _summary(10e12, [30.0, 32.0], 80e6, step_ms=34.0)
    p = predict_summary_step(s, models)
    assert abs(p.expected.compute_ms - 20.0) < 1e-6
    assert abs(p.expected.step_ms - (32.0 + 2.0 * 8.08 / 8.0)) < 1e-3  # slowest rank + the tail, scaled
    # the same job at half the fleet's FLOP/s: its compute is expected at half of what it took
    slow = predict_summary_step(_summary(5e12, [30.0, 32.0], 80e6, step_ms=34.0), models)
    assert abs(slow.expected.step_ms - (22.0 + 2.0 * 8.08 / 8.0)) < 1e-3
    assert slow.worst[0] == ("F2:1x1x1", 2.0)
    # the fleet's healthy spread raises the slowest rank by its expected maximum over the ranks
    spread = predict_summary_step(s, models, rank_spread=0.05)
    assert abs(spread.expected.step_ms - p.expected.step_ms - 20.0 * 0.05 * expected_max_z(2)) < 1e-6
    assert 0.5 < expected_max_z(2) < 0.6 and 2.9 < expected_max_z(500) < 3.1


def test_real_ascend_pair_predicted_from_the_other_rank() -> None:
    root = REAL / "ascend-torch_npu"
    tasks = rank_tasks([parse_ascend(root / f"rank{r}_ascend_pt") for r in (0, 1)])
    assert len(tasks) == 2 and (tasks[0].coll >= 0).sum() == (tasks[1].coll >= 0).sum() > 0
    held = held_out_predictions(tasks)
    assert sorted(p.rank for p, _ in held) == [0, 1]
    assert all("rank(s) 1" in f for p, f in held if p.rank == 0) and all("rank(s) 0" in f for p, f in held
                                                                         if p.rank == 1)
    replay = predict_trace(tasks, [t.dur.copy() for t in tasks], [np.full(t.ts.size, 3, np.int8) for t in tasks])
    for o in replay:
        assert o.error < 0.01  # the composition with the observed durations gives the observed step back
    for p, _ in held:
        assert p.error < 0.05  # held out: the other rank's durations for both ranks of the replay
        assert p.baseline_ms < p.observed.step_ms
    # inter-rank sync: every matched collective ends at one time on both ranks
    durs = [fit_durations([(tasks[1], np.ones(tasks[1].ts.size, dtype=bool))], "rank 1").predict(t)[0] for t in tasks]
    sched = simulate(tasks, durs)
    ends = {int(c): float(sched.end[0][i]) for i, c in enumerate(tasks[0].coll) if c >= 0}
    for i, c in enumerate(tasks[1].coll):
        if c >= 0:
            assert sched.end[1][i] == ends[int(c)]


def test_collective_with_a_member_that_never_arrives_in_order() -> None:
    # rank 1's trace holds the two all-reduces in the opposite order (lost or misordered events):
    # neither can wait for the other forever, and every task still gets an end
    r0 = _rank(0, [(0, 10, CP, -1, "A"), (10, 5, CM, 0, "ar0"), (20, 5, CM, 1, "ar1")])
    r1 = _rank(1, [(0, 10, CP, -1, "A"), (10, 5, CM, 1, "ar1"), (20, 5, CM, 0, "ar0")])
    sched = simulate([r0, r1], [np.array([10.0, 5.0, 5.0])] * 2)
    for r in (0, 1):
        assert np.isfinite(sched.end[r]).all() and (sched.end[r] >= sched.start[r]).all()


def test_host_step_that_waited_for_the_device_moves_with_it() -> None:
    # the host's step ends 1 µs after the last kernel (it synchronised): predicted slower kernels end it later;
    # a host step ending long after the device (host-bound) keeps its own end
    synced = rank_tasks_of([(0, 40, CP, -1, "A"), (40, 60, CP, -1, "B")], step_dur=101.0)
    slow = predict_trace([synced], [np.array([40.0, 120.0])], [np.full(2, 2, dtype=np.int8)])
    assert abs(slow[0].expected.step_ms - 0.161) < 1e-9 and abs(slow[0].observed.step_ms - 0.101) < 1e-9
    host = rank_tasks_of([(0, 40, CP, -1, "A"), (40, 60, CP, -1, "B")], step_dur=1000.0)
    same = predict_trace([host], [np.array([40.0, 120.0])], [np.full(2, 2, dtype=np.int8)])
    assert abs(same[0].expected.step_ms - 1.0) < 1e-9


def rank_tasks_of(rows: list[tuple[float, float, int, int, str]], step_dur: float) -> RankTasks:
    t = _rank(0, rows)
    t.steps = [Step(0, 0.0, step_dur)]
    last = float((t.ts + t.dur).max())
    if last <= step_dur <= last * 1.05:
        t.end_sync = {0: (0.0, last)}
    return t


def test_real_kineto_pair_baseline_underestimates() -> None:
    from streams.profiles.importers.kineto import parse_kineto

    root = REAL / "kineto-hta"
    tasks = rank_tasks([parse_kineto(root / f"trace_filter_sampled_rank-{r}.json.gz") for r in (0, 1)])
    preds = [p for p, _ in held_out_predictions(tasks)]
    assert len(preds) == 4 and all(t.end_sync for t in tasks)  # each step's host end waited for the device
    for p in preds:
        device = p.observed.compute_ms + p.observed.comm_exposed_ms
        assert p.baseline_ms < 0.7 * device  # paper 001: summing streams misses the waits
        assert p.error < 0.05
