"""Analyzers on constructed inputs whose answer is known by construction (pure, no files)."""

from __future__ import annotations

import numpy as np

from streams.advice import CAUSES, advise_cause
from streams.profiles.analysis.cluster_table import cluster_table_verdict
from streams.profiles.analysis.communication import communication_causes
from streams.profiles.analysis.critical_path import critical_path
from streams.profiles.analysis.io_queue import io_queue_finding, queue_verdicts
from streams.profiles.analysis.ranks import cluster_verdict
from streams.profiles.analysis.roofline import classify
from streams.profiles.importers.msprof_cluster import parse_cluster
from streams.profiles.model import COMMUNICATION, COMPUTE, Collective, Kernels, Names, Profile, Step
from tests.streams.profiles.conftest import FIXTURES


def test_io_queue_rule_order() -> None:
    assert queue_verdicts([1, 0, 0, 0], [5, 2, 0, 0], [5, 5, 3, 0]) == [
        "none", "slow_fetching", "slow_processing", "slow_reading"]
    finding = io_queue_finding([0, 0, 0, 1], [0, 0, 0, 0], [4, 4, 4, 4], rank=2)
    assert finding is not None and finding.cause == "slow_processing" and finding.rank == 2


def test_roofline_classes() -> None:
    assert classify(0.9, 0.1, ai=100.0, ai_necessary=50.0, u_thr=0.6) == "compute_bound"
    assert classify(0.1, 0.8, ai=10.0, ai_necessary=50.0, u_thr=0.6) == "memory_bound"
    assert classify(0.2, 0.2, ai=10.0, ai_necessary=50.0, u_thr=0.6) == "under_utilised"


def test_critical_path_follows_the_dependent_chain() -> None:
    names = Names()
    # a(0-10) -> b(10-30) on another stream -> c(30-35); d(0-25) overlaps but is not on the path
    ts = np.array([0.0, 10.0, 30.0, 0.0])
    dur = np.array([10.0, 20.0, 5.0, 25.0])
    k = Kernels(ts, dur, np.array([COMPUTE, COMMUNICATION, COMPUTE, COMPUTE], np.int8),
                np.array([1, 2, 1, 3], np.int32), np.array([names.id(n) for n in "abcd"], np.int32),
                np.full(4, -1, np.int64))
    path = critical_path(k, names, gap_us=0.5)
    assert path.length_us == 35.0 and path.tasks == 3
    assert path.by_kind_us == {"compute": 15.0, "communication": 20.0}


def _rank(rank: int, starts: list[float], durs: list[float], stage: int | None = None) -> Profile:
    colls = [Collective("ncclKernel_AllReduce", "allreduce", s, d, 1e6, "0", i)
             for i, (s, d) in enumerate(zip(starts, durs, strict=True))]
    return Profile(source=f"r{rank}", format="kineto", rank=rank, collectives=colls, stage=stage,
                   steps=[Step(1, 0.0, 1000.0)])


def test_late_arriver_and_stages_kept_apart() -> None:
    ranks = [_rank(0, [100, 300], [50, 60]), _rank(1, [102, 305], [48, 55]), _rank(2, [140, 350], [10, 10])]
    verdict = cluster_verdict(ranks)
    assert verdict and verdict[0].rank == 2 and verdict[0].cause == "slow_rank"
    # stage 1 starts its collectives later by design (pipeline bubble), ending when stage 0's do:
    # compared across stages it would be "late"; kept apart, the late rank is rank 1 of stage 0
    staged = [_rank(0, [100, 300], [50, 60], 0), _rank(1, [130, 330], [20, 30], 0),
              _rank(2, [145, 350], [5, 10], 1), _rank(3, [145, 350], [5, 10], 1)]
    assert [f.rank for f in cluster_verdict(staged)] == [1]
    unstaged = [_rank(p.rank or 0, [c.ts for c in p.collectives], [c.dur for c in p.collectives]) for p in staged]
    assert [f.rank for f in cluster_verdict(unstaged)] != [1]


def test_msprof_cluster_verdict() -> None:
    findings = cluster_table_verdict(parse_cluster(FIXTURES / "msprof_cluster"))
    assert {f.rank for f in findings} == {2}


def test_communication_causes_small_unaligned_and_retransmission() -> None:
    p = Profile(source="x", format="ascend_pt", rank=0, collectives=[
        Collective("hcom_allReduce_1", "allreduce", 0.0, 10.0, 1000.0, "g", 0,
                   transfers_bytes=(1000.0, 2048.0), transfers_us=(5.0, 5e6))])
    causes = {f.cause for f in communication_causes(p, [])}
    assert {"small_packets", "alignment", "retransmission"} <= causes


def test_every_cause_has_advice_with_a_suggestion() -> None:
    for key, advice in CAUSES.items():
        assert advice.suggestion and advise_cause(key) is advice


def test_down_clocking_from_the_ascend_frequency_counter(real_samples: object) -> None:
    from streams.profiles.analysis.roofline import DEFAULT_PEAKS, roofline
    from streams.profiles.importers.ascend_pt import parse_ascend
    from tests.streams.profiles.conftest import ASCEND

    p = parse_ascend(ASCEND / "rank0_ascend_pt")
    assert p.meta["clock_mhz_min"] == DEFAULT_PEAKS["Ascend"].clock_mhz  # the sample runs at its rated clock
    assert "down_clocking" not in {f.cause for f in roofline(p)}
    p.meta["clock_mhz_min"] = 0.9 * DEFAULT_PEAKS["Ascend"].clock_mhz
    assert "down_clocking" in {f.cause for f in roofline(p)}
