"""Split group (streams/detect/scopes/group_split.py) on hand-built frames: 16 ranks, 2 PP stages (0-7, 8-15,
stage 1 works 10 % longer by design), EP groups of 4 with stride 2 ({0,2,4,6}, {1,3,5,7}, ...),
TP pairs (r, r+1), DP halves of each stage."""

from __future__ import annotations

import numpy as np

from schemas.columns import DOMAINS, PHASES
from streams.detect.config import DetectionConfig
from streams.detect.incidents.join import join
from streams.detect.scopes.finding import Finding
from streams.detect.scopes.group_split import Params, evaluate
from streams.detect.windows.step_frames import Frame, ReportedLayout

WORLD = 16
PARAMS = DetectionConfig().params(Params)


def _topo() -> ReportedLayout:
    topo = ReportedLayout()
    topo.grow(WORLD)
    r = np.arange(WORLD)
    topo.stage = (r // 8).astype(np.int64)
    topo.groups[DOMAINS.index("ep")] = (r // 8) * 2 + r % 2
    topo.groups[DOMAINS.index("tp")] = r // 2
    topo.groups[DOMAINS.index("dp")] = r // 4
    return topo


def _frame(busy: np.ndarray, gc: np.ndarray | None = None) -> Frame:
    frame = Frame.empty(7, WORLD, 0)
    frame.seen[:] = True
    frame.start_ns[:] = 0
    frame.end_ns[:] = (busy * 1e6).astype(np.int64)
    frame.phases[PHASES.index("comm_exposed_ms")] = 0.0
    frame.phases[PHASES.index("gc_ms")] = 0.0 if gc is None else gc
    return frame


def _healthy(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(np.arange(WORLD) < 8, 1000.0, 1100.0) * rng.normal(1.0, 0.02, WORLD)


def test_hot_and_idle_members_of_one_group_are_that_groups_finding() -> None:
    busy = _healthy(0)
    busy[[8, 10]] *= 1.3   # EP group 2 = {8, 10, 12, 14}: hot experts
    busy[[12, 14]] *= 0.85  # ... and idle ones
    found = evaluate(_frame(busy), _topo(), PARAMS)
    assert [(f.key, f.scope, f.domain, f.group, f.ranks) for f in found] == [
        ("group:ep/2", "group", "ep", 2, [8, 10, 12, 14])], "the DP half holding it too is not reported"


def test_structural_stage_imbalance_and_jitter_are_no_split() -> None:
    for seed in range(200):
        assert evaluate(_frame(_healthy(seed)), _topo(), PARAMS) == []


def test_a_slow_rank_or_a_gc_pause_is_no_split() -> None:
    busy = _healthy(1)
    busy[5] *= 1.4  # a straggler: its peers are not faster than usual
    assert evaluate(_frame(busy), _topo(), PARAMS) == []
    busy = _healthy(2)
    gc = np.zeros(WORLD)
    gc[[8, 10]] = 700.0
    busy[[8, 10]] += 700.0  # GC pauses on two members (a storm), while two others happen to be quick
    busy[[12, 14]] *= 0.9
    assert evaluate(_frame(busy, gc), _topo(), PARAMS) == []


def test_a_member_missing_means_no_verdict() -> None:
    busy = _healthy(0)
    busy[[8, 10]] *= 1.3
    busy[[12, 14]] *= 0.85
    frame = _frame(busy)
    frame.seen[14] = False
    assert [f.key for f in evaluate(frame, _topo(), PARAMS)] == []


def test_slow_ranks_inside_a_split_group_join_it() -> None:
    busy = _healthy(0)
    busy[[8, 10]] *= 1.3
    busy[[12, 14]] *= 0.85
    split = evaluate(_frame(busy), _topo(), PARAMS)
    ranks = [Finding(rule="SLOW_RANK", key=f"rank:{r}", scope="rank", step=7, summary="slow", ranks=[r],
                     host="node-1") for r in (8, 10)]
    other = Finding(rule="SLOW_RANK", key="rank:3", scope="rank", step=7, summary="slow", ranks=[3], host="node-0")
    out = join([*ranks, other, *split], WORLD, [], 7)
    assert out[0].rule == "SLOW_GROUP", "the group's rule is the primary one"
    assert {(f.key, f.domain, f.group) for f in out if f.rule == "SLOW_RANK" and f.ranks != [3]} == {
        ("group:ep/2", "ep", 2)}
    assert next(f for f in out if f.ranks == [3]).key == "rank:3"


def _split_per_group(domain: str, gid: np.ndarray, rel: np.ndarray, hot_at: float, cold_at: float,
                     spread_at: float) -> list[tuple[str, int, frozenset[int], float, float]]:
    """The per-group loop `_split_groups` replaced (one pass over the ranks per group), as the reference."""
    out = []
    for g in np.unique(gid[gid >= 0]).tolist():
        ranks = np.flatnonzero(gid == g)
        values = rel[ranks]
        if ranks.size < 2 or not np.isfinite(values).all():
            continue
        hi, lo = float(values.max()), float(values.min())
        if hi >= hot_at and lo <= -cold_at and hi - lo >= spread_at:
            out.append((domain, int(g), frozenset(ranks.tolist()), hi, lo))
    return out


def test_all_groups_at_once_find_what_the_per_group_loop_found() -> None:
    from streams.detect.scopes.group_split import _split_groups

    rng = np.random.default_rng(7)
    found = 0
    for _ in range(400):
        n = int(rng.integers(1, 80))
        gid = rng.integers(-1, int(rng.integers(1, 12)), n)  # -1: no group in this domain
        if rng.random() < 0.3:
            gid = np.sort(gid)
        rel = rng.normal(0.0, 0.15, n)
        rel[rng.random(n) < 0.05] = np.nan  # members that have not reported
        if rng.random() < 0.1:
            rel[rng.random(n) < 0.05] = np.inf
        args = (gid.astype(np.int64), rel, 0.1, 0.05, float(rng.choice([0.2, 0.3])))
        want = _split_per_group("ep", *args)
        assert _split_groups("ep", *args) == want
        found += len(want)
    assert found > 50, "the random cases split groups often enough to compare"
