"""Temporal breakdown agreement: torch_npu's own step_trace_time.csv (Ascend) and HTA 0.5.0 (Kineto)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streams.profiles.analysis.breakdown import breakdown_of, hta_breakdown, step_breakdowns
from streams.profiles.analysis.intervals import intersection_total, total, union
from streams.profiles.analysis.ranks import cluster_verdict, late_start_straggler
from streams.profiles.importers.ascend_pt import parse_ascend
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.model import Kernels
from tests.streams.profiles.conftest import ASCEND, KINETO
from tests.streams.profiles.hta_runner import hta_analysis

TOL = 0.02


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOL * max(abs(theirs), 1.0)


@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_steps_agree_with_step_trace_time(real_samples: Path, rank: int) -> None:
    profile = parse_ascend(ASCEND / f"rank{rank}_ascend_pt")
    ours = {b.step: b for b in step_breakdowns(profile)}
    assert profile.reference, "step_trace_time.csv not read"
    for ref in profile.reference:
        b = ours[ref.step]
        v = ref.values
        pairs = {
            "Computing": b.compute, "Communication": b.communication, "Overlapped": b.overlapped,
            "Communication(Not Overlapped)": b.communication_not_overlapped, "Free": b.free, "Stage": b.span,
            "Preparing": b.preparing,
        }
        for column, value in pairs.items():
            assert _close(value, v[column]), f"step {ref.step} {column}: ours {value} vs torch_npu {v[column]}"


@pytest.fixture(scope="module")
def hta_sampled(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    d = tmp_path_factory.mktemp("hta-sampled")
    for r in (0, 1):  # links, not copies: HTA reads every trace in a directory
        (d / f"trace_filter_sampled_rank-{r}.json.gz").symlink_to(KINETO / f"trace_filter_sampled_rank-{r}.json.gz")
    return hta_analysis(d), d


@pytest.fixture(scope="module")
def hta_nccl(tmp_path_factory: pytest.TempPathFactory) -> object:
    d = tmp_path_factory.mktemp("hta-nccl")
    (d / "nccl_parser_config_nccl_data.json.gz").symlink_to(KINETO / "nccl_parser_config_nccl_data.json.gz")
    return hta_analysis(d)


def _compare_with_hta(table: object, profiles: dict[int, object], rounding: bool) -> None:
    for row in table.to_dict("records"):  # type: ignore[attr-defined]
        b = hta_breakdown(profiles[int(row["rank"])], hta_rounding=rounding)  # type: ignore[arg-type]
        for ours, theirs in ((b.idle, row["idle_time(us)"]), (b.compute, row["compute_time(us)"]),
                             (b.non_compute, row["non_compute_time(us)"]), (b.span, row["kernel_time(us)"])):
            assert _close(ours, float(theirs)), f"rank {row['rank']}: ours {ours} vs HTA {theirs}"


def test_kineto_old_layout_agrees_with_hta(real_samples: Path, hta_sampled: tuple[object, Path]) -> None:
    analysis, _ = hta_sampled
    table = analysis.get_temporal_breakdown(visualize=False)  # type: ignore[attr-defined]
    profiles = {r: parse_kineto(KINETO / f"trace_filter_sampled_rank-{r}.json.gz") for r in (0, 1)}
    _compare_with_hta(table, profiles, rounding=False)


def test_kineto_2024_layout_agrees_with_hta(real_samples: Path, hta_nccl: object) -> None:
    """HTA rounds ns-resolution time stamps to whole µs (start up, end down); compared like for like,
    and our exact figures stay within a few percent of HTA's rounded ones."""
    table = hta_nccl.get_temporal_breakdown(visualize=False)  # type: ignore[attr-defined]
    profile = parse_kineto(KINETO / "nccl_parser_config_nccl_data.json.gz")
    _compare_with_hta(table, {0: profile}, rounding=True)
    exact = hta_breakdown(profile)
    assert abs(exact.compute - float(table["compute_time(us)"][0])) <= 0.05 * exact.compute


def test_straggler_matches_hta(real_samples: Path, hta_sampled: tuple[object, Path]) -> None:
    analysis, _ = hta_sampled
    theirs = analysis.get_potential_stragglers(num_candidates=1)  # type: ignore[attr-defined]
    profiles = [parse_kineto(KINETO / f"trace_filter_sampled_rank-{r}.json.gz") for r in (0, 1)]
    assert theirs, "HTA gave no straggler on its own sample"
    assert late_start_straggler(profiles) == theirs[0]
    verdict = cluster_verdict(profiles)
    assert verdict and verdict[0].rank == theirs[0]


def test_interval_algebra_against_a_brute_force_grid() -> None:
    rng = np.random.default_rng(7)
    s = rng.integers(0, 1000, 200).astype(float)
    e = s + rng.integers(1, 50, 200)
    kind = rng.integers(0, 3, 200).astype(np.int8)
    grid = np.zeros((3, 1100), bool)
    for a, b, k in zip(s.astype(int), e.astype(int), kind, strict=True):
        grid[k, a:b] = True
    k = Kernels(s, e - s, kind, np.zeros(200, np.int32), np.zeros(200, np.int32), np.zeros(200, np.int64))
    b = breakdown_of(k)
    assert b.compute == grid[0].sum()
    assert b.communication == grid[1].sum()
    assert b.overlapped == (grid[0] & grid[1]).sum()
    assert b.busy == grid.any(axis=0).sum()
    us, ue = union(s, e)
    assert total(us, ue) == grid.any(axis=0).sum()
    assert intersection_total(*union(s[:100], e[:100]), *union(s[100:], e[100:])) == (
        np.zeros(1100, bool) | _mask(s[:100], e[:100]) & _mask(s[100:], e[100:])).sum()


def _mask(s: np.ndarray, e: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    m = np.zeros(1100, bool)
    for a, b in zip(s.astype(int), e.astype(int), strict=True):
        m[a:b] = True
    return m
