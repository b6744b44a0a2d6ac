"""Which rank the others wait for, and whether that makes a slow rank (streams/profiles/analysis/ranks.py
`cluster_verdict`): the rank waited for longest in all, named at `warning` when its peers wait >= 5 % of a step
for it (msprof-analyze's advisor and the live rules' bar), at `info` below."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.profiles.analysis.ranks import cluster_verdict
from streams.profiles.loader import load_all
from streams.profiles.model import Collective, Profile, Step

LEVEL0 = Path(__file__).resolve().parents[3] / "bench" / "data" / "real" / "msinsight-torch_npu-level0"


def _rank(rank: int, spans: list[tuple[float, float]], step_us: float) -> Profile:
    colls = [Collective("hcom_allReduce__1", "allreduce", ts, dur, 1e6, "g", i) for i, (ts, dur) in enumerate(spans)]
    return Profile(source=f"r{rank}", format="ascend", rank=rank, collectives=colls, steps=[Step(1, 0.0, step_us)])


def _pair(late_us: float, step_us: float) -> list[Profile]:
    """Four all-reduces: rank 1 starts the first `late_us` after rank 0 (its kernel that much shorter, both end
    together); rank 0 starts the other three 6-15 µs after rank 1 with the shorter kernel (the all-reduces' jitter):
    the shape of the torch_npu ImageNet pair."""
    r0 = [(0.0, 79_000.0), (100_006.0, 2_280.0), (110_008.0, 2_390.0), (120_015.0, 22_200.0)]
    r1 = [(late_us, 79_000.0 - late_us), (100_000.0, 2_286.0), (110_000.0, 2_398.0), (120_000.0, 22_215.0)]
    return [_rank(0, r0, step_us), _rank(1, r1, step_us)]


def test_the_rank_waited_for_longest_is_named_not_the_one_last_most_often() -> None:
    # counted by collectives, rank 0 "won" 3 to 1 with 6-15 µs, then failed the 1 % bar: nobody was named
    verdict = cluster_verdict(_pair(5_600.0, 155_000.0))
    assert [(f.rank, f.severity) for f in verdict] == [(1, "info")]  # 5.6 ms of a 155 ms step: 3.6 %
    assert verdict[0].evidence["wait_step_share"] == pytest.approx(5_600 / 155_000)
    assert "1 of 4 collectives" in verdict[0].summary and "under the 5 %" in verdict[0].summary


def test_a_late_arriver_whose_peers_wait_5_percent_of_a_step_is_a_slow_rank() -> None:
    verdict = cluster_verdict(_pair(16_900.0, 129_000.0))
    assert [(f.rank, f.severity) for f in verdict] == [(1, "warning")]  # 13.1 % of the step
    assert "under the" not in verdict[0].summary


def test_jitter_alone_names_nobody() -> None:
    assert cluster_verdict(_pair(0.0, 155_000.0)) == []  # rank 0's 6-15 µs: under 1 % of the step


def test_real_torch_npu_pairs_late_arrivers_by_what_they_cost(real_samples: Path) -> None:
    # ImageNet: rank 1 starts the step's first all-reduce 5.6 ms late (3.6 % of the step): msprof-analyze sees no
    # slow rank (5 % bar), the live pair rule neither; level 0: rank 0 waits 13.1 % of the step for rank 1
    imagenet, _ = load_all([real_samples / "ascend-torch_npu"])
    verdict = cluster_verdict(imagenet)
    assert [(f.rank, f.severity) for f in verdict] == [(1, "info")]
    assert verdict[0].evidence["wait_step_share"] == pytest.approx(0.036, abs=0.001)
    level0, _ = load_all([LEVEL0])
    verdict = cluster_verdict(level0)
    assert [(f.rank, f.severity) for f in verdict] == [(1, "warning")]
    assert verdict[0].evidence["wait_step_share"] == pytest.approx(0.131, abs=0.001)
