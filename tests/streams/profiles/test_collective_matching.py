"""Collectives matched across ranks when a trace lost events (streams/profiles/analysis/ranks.py
`match_collectives`): by order while the order is possible, by the common end where it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.profiles.analysis.ranks import cluster_verdict, match_collectives
from streams.profiles.analysis.waits import collective_waits
from streams.profiles.loader import load_all
from streams.profiles.model import Collective, Profile, Step

# (end µs, duration µs) of four all-to-alls; rank 1 arrives 2 ms late at each, so its kernel is 2 ms shorter
ENDS = [10_000.0, 30_000.0, 50_000.0, 70_000.0]


def _rank(rank: int, spans: list[tuple[float, float]], offset_us: float = 0.0) -> Profile:
    colls = [Collective("ncclKernel_SendRecv", "sendrecv", end - dur + offset_us, dur, 1e6, "pg0", i)
             for i, (end, dur) in enumerate(spans)]
    return Profile(source=f"r{rank}", format="kineto", rank=rank, collectives=colls,
                   steps=[Step(1, offset_us, 80_000.0)])


def _pair(drop0: int | None, drop1: int | None) -> list[Profile]:
    r0 = [(e, 8_000.0) for i, e in enumerate(ENDS) if i != drop0]
    r1 = [(e, 6_000.0) for i, e in enumerate(ENDS) if i != drop1]
    return [_rank(0, r0), _rank(1, r1)]


def test_a_complete_pair_is_matched_by_order() -> None:
    matched = match_collectives(_pair(None, None))
    assert matched.unmatched == 0 and matched.by_end == ()
    verdict = cluster_verdict(_pair(None, None))
    assert [(f.rank, f.evidence["collectives"], f.evidence["mean_lateness_us"]) for f in verdict] == [(1, 4.0, 2000.0)]


def test_traces_that_lost_different_collectives_are_matched_by_their_common_end() -> None:
    # rank 0's trace lost the 2nd all-to-all, rank 1's the 3rd: by order, rank 0's 2nd (the 3rd) meets rank 1's
    # 2nd (the 2nd), which ended 20 ms earlier; rank 0 would look 18 ms late there
    profiles = _pair(1, 2)
    matched = match_collectives(profiles)
    assert matched.by_end == (("pg0", "sendrecv"),) and matched.unmatched == 2
    assert [sorted(m) for m in matched.matched.values()] == [[0, 1], [0, 1]]
    verdict = cluster_verdict(profiles)
    assert [(f.rank, f.evidence["collectives"], f.evidence["mean_lateness_us"]) for f in verdict] == [(1, 2.0, 2000.0)]
    assert "2 collectives that only one rank's trace holds left out" in verdict[0].summary
    waits = collective_waits(profiles)
    assert [(w.late_rank, w.r_wait) for w in waits] == [(1, pytest.approx(1 - 7 / 8))] * 2


def test_recordings_that_start_at_different_collectives_are_matched_by_end() -> None:
    # rank 0's profiler started one all-to-all earlier than rank 1's: by order every pair is one collective off
    profiles = [_rank(0, [(e, 8_000.0) for e in ENDS]), _rank(1, [(e, 6_000.0) for e in ENDS[1:]])]
    matched = match_collectives(profiles)
    assert matched.unmatched == 1 and len(matched.matched) == 3
    assert all(abs(sum(m[0]) - sum(m[1])) < 1.0 for m in matched.matched.values())  # each pair ends together
    verdict = cluster_verdict(profiles)  # by order: rank 1 "22 ms late" at each
    assert [(f.rank, f.evidence["collectives"], f.evidence["mean_lateness_us"]) for f in verdict] == [(1, 3.0, 2000.0)]


def test_eight_ranks_that_each_lost_some_collectives_name_the_late_one() -> None:
    # 40 all-reduces; rank 5 starts each 1 ms late (so its kernel is 1 ms shorter); every rank's trace lost a
    # different tenth of them. Matched by end, each collective is compared on the ranks that hold it
    ends = [10_000.0 * (i + 1) for i in range(40)]
    profiles = [_rank(r, [(e, 4_000.0 if r == 5 else 5_000.0) for i, e in enumerate(ends) if (i + r) % 10 != 0])
                for r in range(8)]
    matched = match_collectives(profiles)
    assert len(matched.matched) == 40 and matched.unmatched == 0
    late = [m for m in matched.matched.values() if 5 in m]
    assert len(late) == 36 and all(max(m, key=lambda r: m[r][0]) == 5 for m in late)
    verdict = cluster_verdict(profiles)
    assert [(f.rank, f.evidence["collectives"], f.evidence["mean_lateness_us"]) for f in verdict] == [(5, 36.0, 1000.0)]


def test_clocks_apart_keep_the_order() -> None:
    # rank 1's host clock runs 50 ms ahead: no pair ends together either way, so the order stands (as before)
    profiles = [_rank(0, [(e, 8_000.0) for e in ENDS]), _rank(1, [(e, 6_000.0) for e in ENDS], offset_us=50_000.0)]
    matched = match_collectives(profiles)
    assert matched.by_end == () and matched.unmatched == 0 and len(matched.matched) == 4


def test_a_small_clock_offset_keeps_the_order_of_short_and_long_collectives() -> None:
    # rank 1's host clock runs 1 ms ahead: its 100-ms all-reduces overlap rank 0's and end within their slack
    # (2 %), its 0.2-ms ones do not even overlap; read through the offset the long ones show, every pair ends
    # together, so the order stands and no short one is left out
    spans = [(200_000.0 * (i + 1), 100_000.0 if i % 2 == 0 else 200.0) for i in range(6)]
    profiles = [_rank(0, spans), _rank(1, [(end, dur * 0.9) for end, dur in spans], offset_us=1_000.0)]
    matched = match_collectives(profiles)
    assert matched.by_end == () and matched.unmatched == 0 and len(matched.matched) == 6


def test_kineto_sample_pairs_only_the_all_to_alls_both_traces_hold(real_samples: Path) -> None:
    # HTA's trace_filter sample lost different kernels on each rank: 5 of each rank's 10 SendRecv kernels end
    # together with one of the other's (within 0.33 ms), rank 1 starting later at all 5 (0.08-22.3 ms)
    folder = real_samples / "kineto-hta"
    profiles, _ = load_all([folder / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)])
    matched = match_collectives(profiles)
    assert len(matched.matched) == 5 and matched.unmatched == 10
    verdict = cluster_verdict(profiles)
    assert [f.rank for f in verdict] == [1]
    assert verdict[0].evidence["mean_lateness_us"] == pytest.approx(6373.0, abs=1.0)
