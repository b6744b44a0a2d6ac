"""A group whose members arrive spread out step after step: its latest rank is no outlier of the spread (robust z,
Dixon's Q), but when the group waits for it alone >= 5 % of the step, step after step, it is the straggler
(streams/detect/scopes/sustained.py's gap branch, through streams/detect/scopes/slow_rank.py)."""

from __future__ import annotations

import numpy as np

from schemas.columns import DOMAINS
from streams.detect.config import DetectionConfig
from streams.detect.scopes.slow_rank import Params, SlowRankState, evaluate
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, ReportedLayout

WORLD = 8
PARAMS = DetectionConfig().params(Params)


def _topology() -> ReportedLayout:
    topo = ReportedLayout()
    topo.grow(WORLD)
    topo.hosts = [f"node-{r}" for r in range(WORLD)]
    topo.host_index = {h: i for i, h in enumerate(topo.hosts)}
    topo.host_of = np.arange(WORLD, dtype=np.int64)
    topo.groups[DOMAINS.index("dp")] = 0
    topo.sizes[DOMAINS.index("dp")] = WORLD
    return topo


def _frame(step: int, busy: np.ndarray, step_ms: float = 130.0) -> Frame:
    """Every rank's step `step_ms` long; the time it does not work it waits in collectives."""
    f = Frame.empty(step, WORLD, 0)
    f.seen[:] = True
    f.start_ns[:] = step * 10**9
    f.end_ns[:] = f.start_ns + int(step_ms * 1e6)
    f.phases[PHASE_INDEX["comm_exposed_ms"]] = step_ms - busy
    f.phases[PHASE_INDEX["forward_ms"]] = busy
    return f


def _run(latest_ms: float, steps: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(4)
    base = np.array([70.0, 75.0, 80.0, 85.0, 90.0, 0.0, 95.0, 100.0])  # rank 5 the latest
    state, topo, out = SlowRankState(), _topology(), []
    for step in range(steps):
        busy = base.copy()
        busy[5] = latest_ms
        busy *= rng.lognormal(0.0, 0.003, WORLD)
        state, found = evaluate(_frame(step, busy), topo, state, PARAMS)
        out.append([r for f in found for r in f.ranks])
    return out


def test_the_latest_of_a_spread_out_group_that_the_group_waits_for_alone_is_found() -> None:
    # rank 5 arrives 10 ms (7.7 % of the step) after the next-latest rank in every step: no outlier of the spread
    # (z ~2, Dixon's Q 0.25), but those 10 ms are lost to it alone in every step
    flagged = _run(110.0)
    assert not any(flagged[:9]), "a window of steps first"
    assert all(f == [5] for f in flagged[10:])


def test_the_latest_of_a_spread_out_group_close_behind_the_next_is_not() -> None:
    assert not any(_run(103.0))  # 3 ms (2.3 % of the step) after the next-latest: under mstt's 5 %


def test_the_summary_agrees_with_one_group() -> None:
    """'its DP group waits for' (one group), not 'its DP group wait for' (issue #46)."""
    rng = np.random.default_rng(4)
    state, topo = SlowRankState(), _topology()
    summaries: list[str] = []
    for step in range(30):
        busy = np.array([70.0, 75.0, 80.0, 85.0, 90.0, 160.0, 95.0, 100.0]) * rng.lognormal(0.0, 0.003, WORLD)
        state, found = evaluate(_frame(step, busy), topo, state, PARAMS)
        summaries += [f.summary for f in found if f.rule == "SLOW_RANK"]
    assert summaries and all("is the one its DP group waits for" in s for s in summaries), summaries[:2]
