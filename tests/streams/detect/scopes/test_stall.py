"""Hung job by stall (streams/detect/scopes/stall.py) on hand-built device samples."""

from __future__ import annotations

import numpy as np

from streams.detect.scopes.stall import Params, StallState, evaluate
from tests.streams.helpers import hosts_topology

S = 1_000_000_000
TIMEOUT = 5 * S
FACTOR_2 = Params(hang_stall_factor=2.0)  # devices sampling 2 window timeouts past the last step


def _state(world: int, seconds: int, busy: dict[int, float], silent: tuple[int, ...] = ()) -> StallState:
    st = StallState()
    st.on_device(np.arange(world, dtype=np.int64), np.full(world, 99 * S, dtype=np.int64), np.full(world, 90.0))
    st.on_steps(np.array([100 * S], dtype=np.int64))
    for t in range(1, seconds + 1):
        ranks = np.array([r for r in range(world) if r not in silent], dtype=np.int64)
        load = np.array([busy.get(int(r), 97.0) for r in ranks])
        st.on_device(ranks, np.full(ranks.size, 100 * S + t * S, dtype=np.int64), load)
    return st


def test_idle_rank_among_spinning_peers_is_hung() -> None:
    st = _state(16, 12, {5: 0.0})
    found = evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True)
    assert [(f.rule, f.ranks) for f in found] == [("HUNG_RANK", [5])]
    assert evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True) == [], "reported once per stall"


def test_silent_host_is_one_host_finding() -> None:
    st = _state(16, 12, {}, silent=tuple(range(8, 16)))
    found = evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True)
    assert [(f.rule, f.host, len(f.ranks)) for f in found] == [("HUNG_HOST", "node-1", 8)]


def test_short_pause_or_whole_job_idle_is_not_a_hang() -> None:
    assert evaluate(_state(16, 8, {5: 0.0}), hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True) == []
    idle = {r: 0.0 for r in range(16)}
    assert evaluate(_state(16, 12, idle), hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True) == []


def test_live_stall_must_hold_a_timeout_with_input_current() -> None:
    st = _state(16, 12, {5: 0.0})
    assert evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, True, 0, final=False) == [], "a backlog is not a hang"
    assert evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 1 * S, final=False) == []
    assert evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 3 * S, final=False) == []
    found = evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 7 * S, final=False)
    assert [f.rule for f in found] == ["HUNG_RANK"]


def test_steps_resuming_reset_the_stall() -> None:
    st = _state(16, 12, {5: 0.0})
    st.on_steps(np.array([113 * S], dtype=np.int64))
    assert evaluate(st, hosts_topology(), 31, TIMEOUT, FACTOR_2, False, 0, final=True) == []


def test_a_silent_host_whose_agent_sampled_once_after_the_last_step_is_still_silent() -> None:
    """Each host's agent samples at its own phase: the dead host's last sample, taken while the last
    step was still running by the job's clock, is stamped up to a sampling interval after its end."""
    st = _state(16, 12, {}, silent=tuple(range(8, 16)))
    st.on_device(np.arange(8, 16, dtype=np.int64), np.full(8, 100 * S + 800_000_000, dtype=np.int64),
                 np.full(8, 90.0))
    found = evaluate(st, hosts_topology(), 30, TIMEOUT, FACTOR_2, False, 0, final=True)
    assert [(f.rule, f.host, len(f.ranks)) for f in found] == [("HUNG_HOST", "node-1", 8)]


def _samples(state: StallState, ranks: list[int], ts_s: float, aicore: float) -> None:
    state.on_device(np.asarray(ranks, dtype=np.int64), np.full(len(ranks), int(ts_s * 1e9), dtype=np.int64),
                    np.full(len(ranks), aicore))


def test_a_stall_cut_at_a_time_keeps_only_the_samples_taken_before_it() -> None:
    state = StallState()
    _samples(state, [0, 1, 2, 3], 9.0, 80.0)
    state.on_steps(np.asarray([10 * 10**9], dtype=np.int64))  # the last step ended at 10 s
    for t in (11.0, 12.0, 13.0):
        _samples(state, [0, 1], t, 90.0)  # ranks 2 and 3 silent after the last step
    for t in (40.0, 41.0):
        _samples(state, [0, 1, 2, 3], t, 5.0)  # a relaunch's samples, with its own ranks
    cut = state.cut(30 * 10**9)
    assert cut is not None
    assert (cut.newest_dev_ns // 10**9).tolist() == [13, 13, 9, 9]
    assert cut.busy_n.tolist() == [3, 3, 0, 0] and cut.busy_sum[0] == 270.0
    assert (state.newest_dev_ns // 10**9).tolist() == [41, 41, 41, 41]  # the state itself is unchanged
    # a later step end settles the tail: the samples up to it count as before any cut
    state.on_steps(np.asarray([12 * 10**9], dtype=np.int64))
    again = state.cut(30 * 10**9)
    assert again is not None and (again.newest_dev_ns // 10**9).tolist() == [13, 13, 9, 9]
    assert again.busy_n.tolist() == [1, 1, 0, 0]


def test_a_stall_without_its_whole_tail_cannot_be_cut() -> None:
    state = StallState()
    _samples(state, [0, 1], 1.0, 80.0)
    state.on_steps(np.asarray([2 * 10**9], dtype=np.int64))
    state.tail_dropped_ns = 5 * 10**9  # more samples past the last step than it keeps
    assert state.cut(10 * 10**9) is None
    state.on_steps(np.asarray([6 * 10**9], dtype=np.int64))  # what was dropped is before the stall now
    assert state.cut(10 * 10**9) is not None
    old = StallState()
    object.__delattr__(old, "head_newest_ns")  # a state restored from a snapshot that had no kept tail
    _samples(old, [0, 1], 1.0, 80.0)
    assert old.cut(10 * 10**9) is None
