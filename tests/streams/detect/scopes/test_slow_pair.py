"""Slow rank of a pair (streams/detect/scopes/slow_pair.py) on hand-built frames and a 2-rank job through the engine."""

from __future__ import annotations

import numpy as np

from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology as SimTopology
from schemas.columns import DOMAINS
from streams.detect.config import DetectionConfig
from streams.detect.scopes.slow_pair import PairState, Params, evaluate, noise
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, ReportedLayout
from tests.streams.helpers import incidents, run_engine

PARAMS = DetectionConfig().params(Params)
DP = DOMAINS.index("dp")


def _topology(sizes: list[int]) -> ReportedLayout:
    """DP groups of these sizes, one host per rank."""
    world = sum(sizes)
    topo = ReportedLayout()
    topo.grow(world)
    topo.hosts = [f"node-{r}" for r in range(world)]
    topo.host_index = {h: i for i, h in enumerate(topo.hosts)}
    topo.host_of = np.arange(world, dtype=np.int64)
    start = 0
    for g, size in enumerate(sizes):
        topo.groups[DP, start:start + size] = g
        topo.sizes[DP, start:start + size] = size
        start += size
    return topo


def _frame(step: int, waits: list[float], step_ms: float = 100.0, starts_ms: list[float] | None = None) -> Frame:
    """Every rank's step `step_ms` long (starting at `starts_ms`), with these exposed communication waits (ms)."""
    world = len(waits)
    f = Frame.empty(step, world, 0)
    f.seen[:] = True
    offsets = np.asarray(starts_ms if starts_ms is not None else [0.0] * world)
    f.start_ns[:] = (step * 10_000 + offsets) * 1_000_000
    f.end_ns[:] = f.start_ns + int(step_ms * 1e6)
    f.phases[PHASE_INDEX["comm_exposed_ms"]] = waits
    return f


def _run(frames: list[Frame], topo: ReportedLayout) -> list[list[int]]:
    state = PairState()
    flagged = []
    for f in frames:
        state, found = evaluate(f, topo, state, PARAMS)
        flagged.append([r for x in found for r in x.ranks])
    return flagged


def test_the_rank_its_peer_waits_for_is_named_by_the_wait() -> None:
    # rank 1 arrives 12 ms late at every step: rank 0 waits 20 ms in collectives, rank 1 8 ms (12 % of the step)
    flagged = _run([_frame(s, [20.0, 8.0]) for s in range(20)], _topology([2]))
    assert flagged[: PARAMS.warmup_steps] == [[]] * PARAMS.warmup_steps, "no verdict before the pair has a history"
    assert flagged[PARAMS.warmup_steps:] == [[1]] * (20 - PARAMS.warmup_steps)


def test_a_late_start_with_equal_busy_time_is_still_a_wait() -> None:
    # torch_npu level 0's pair: rank 1 starts its step 16 ms late, works as long as rank 0, rank 0 waits for it
    frames = [_frame(s, [81.5, 64.6], step_ms=0.0) for s in range(12)]
    for f in frames:
        f.start_ns[1] += 16_000_000
        f.end_ns[0] = f.start_ns[0] + 136_900_000
        f.end_ns[1] = f.start_ns[1] + 120_900_000
    assert _run(frames, _topology([2]))[-1] == [1]


def test_a_gap_under_five_percent_of_the_step_is_no_straggler() -> None:
    assert not any(_run([_frame(s, [20.0, 16.0]) for s in range(50)], _topology([2])))


def test_healthy_pairs_whose_lead_changes_raise_nothing() -> None:
    rng = np.random.default_rng(5)
    topo = _topology([2])
    for jitter in (0.01, 0.03, 0.08):  # per-rank busy jitter, share of the step
        frames = []
        for s in range(5000):
            busy = 80.0 * (1.0 + rng.normal(0.0, jitter, 2))
            frames.append(_frame(s, (busy.max() - busy + 10.0).tolist()))
        flagged = _run(frames, topo)
        assert not any(flagged), jitter  # 6 sigma of the pair's noise


def _longest_run(flagged: list[list[int]]) -> int:
    """The most steps in a row one rank was flagged (what opens an incident: `slow_rank_min_steps`)."""
    best, run, last = 0, 0, None
    for ranks in flagged:
        rank = ranks[0] if ranks else None
        run = run + 1 if rank is not None and rank == last else (1 if rank is not None else 0)
        last = rank
        best = max(best, run)
    return best


def test_heavy_tailed_hiccups_flag_single_steps_that_never_persist() -> None:
    # one rank-step in 50 (5x the simulator's heavy tail) loses a Pareto-sized stretch (a page-cache miss, OS
    # noise): a one-step gap far past the pair's noise, flagged for that step, never for 3 steps running
    rng = np.random.default_rng(21)
    frames = []
    for s in range(5000):
        busy = 80.0 * (1.0 + rng.normal(0.0, 0.03, 2))
        busy += np.where(rng.random(2) < 0.02, 8.0 * (rng.pareto(1.5, 2) + 1.0), 0.0)
        frames.append(_frame(s, (busy.max() - busy + 10.0).tolist()))
    assert _longest_run(_run(frames, _topology([2]))) < PARAMS.slow_rank_min_steps


def test_a_straggler_that_starts_late_in_a_noisy_run_is_found_at_its_onset() -> None:
    rng = np.random.default_rng(9)
    frames = []
    for s in range(200):
        busy = 80.0 * (1.0 + rng.normal(0.0, 0.01, 2))
        if s >= 100:
            busy[0] *= 1.15  # rank 0 computes 15 % longer from step 100 on
        frames.append(_frame(s, (busy.max() - busy + 10.0).tolist()))
    flagged = _run(frames, _topology([2]))
    assert not any(flagged[:100])
    assert all(f == [0] for f in flagged[100:]), "the onset's jump does not widen the pair's noise"


def test_ranks_with_a_group_of_three_are_left_to_the_outlier_test() -> None:
    # ranks 0-1: a pair; ranks 2-4: a group of three with the same gap (slow_rank.py's to judge)
    flagged = _run([_frame(s, [20.0, 8.0, 20.0, 8.0, 20.0]) for s in range(10)], _topology([2, 3]))
    assert flagged[-1] == [1]


def test_no_wait_figure_no_verdict() -> None:
    frames = [_frame(s, [20.0, 8.0]) for s in range(10)]
    for f in frames:
        f.phases[PHASE_INDEX["comm_exposed_ms"], 0] = np.nan
    assert not any(_run(frames, _topology([2])))


def test_noise_is_read_from_successive_differences() -> None:
    assert noise([0.1] * 10) == 1e-3
    assert noise([0.0] * 10 + [0.2] * 10) == 1e-3  # one jump: a level shift, not noise
    alternating = [0.06, -0.01] * 10
    assert noise(alternating) > 0.07


def test_a_two_rank_job_with_a_straggler_opens_one_slow_rank_incident() -> None:
    topo = SimTopology(dp=2, tp=1, pp=1)
    job = FleetJob("pair", topo, steps=60, seed=4, faults=[straggler(topo, 1, 1.3)])
    found = [i for i in incidents(run_engine(job), "open") if i.rule == "SLOW_RANK"]
    assert [(i.scope, i.ranks) for i in found] == [("rank", [1])]


def test_a_jittery_healthy_two_rank_job_raises_no_slow_rank() -> None:
    job = FleetJob("pair-healthy", SimTopology(dp=2, tp=1, pp=1), steps=300, seed=11, noise=Noise(jitter=0.08))
    assert [i.summary for i in incidents(run_engine(job)) if i.rule == "SLOW_RANK"] == []
