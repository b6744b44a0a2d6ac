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
from streams.profiles.model import COMMUNICATION, COMPUTE, HostOps, Kernels, Names, Profile, Step
from tests.streams.profiles.conftest import ASCEND, KINETO
from tests.streams.profiles.hta_runner import hta_analysis

pytestmark = pytest.mark.slow  # ~20-50 s: left out of make test-quick

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


def _cpu_ahead_profile() -> Profile:
    """Two 100 µs host steps whose kernels run 140 µs+ later; step 1's forward (stream 1) starts while step 0's
    all-reduce (stream 2) still runs. Device: compute 150-200, 210-250 (step 0), 260-300, 340-400 (step 1);
    all-reduce 240-330 (step 0). Whole device time 150-400: busy 230, idle 20 (200-210, 330-340)."""
    names = Names()
    ts = np.array([150.0, 210.0, 240.0, 260.0, 340.0])
    dur = np.array([50.0, 40.0, 90.0, 40.0, 60.0])
    kind = np.array([COMPUTE, COMPUTE, COMMUNICATION, COMPUTE, COMPUTE], np.int8)
    corr = np.arange(1, 6, dtype=np.int64)
    kernels = Kernels(ts, dur, kind, np.array([1, 1, 2, 1, 1], np.int32),
                      np.array([names.id(n) for n in ("fwd", "bwd", "ncclKernel_AllReduce", "fwd", "bwd")], np.int32),
                      corr)
    launch = np.array([10.0, 40.0, 80.0, 110.0, 150.0])  # steps [0, 100) and [100, 200) on the host
    runtime = HostOps(launch, np.full(5, 5.0), np.full(5, names.id("cudaLaunchKernel"), np.int32),
                      np.zeros(5, np.int64), corr)
    return Profile(source="ahead", format="kineto", rank=0, names=names, kernels=kernels, runtime=runtime,
                   steps=[Step(1, 0.0, 100.0), Step(2, 100.0, 100.0)])


def test_kernels_go_to_steps_by_device_time_when_the_cpu_runs_ahead() -> None:
    p = _cpu_ahead_profile()
    whole = breakdown_of(p.kernels)
    assert whole.idle == 20.0
    steps = step_breakdowns(p)
    # by launch, step 1 spans 150-330 (free 10) and step 2 spans 260-400 and calls 300-330, where step 1's
    # all-reduce runs, free (free 40): 50 in all, more than the whole trace's 20. By device time: windows
    # 150-260 and 260-400, which partition the device time.
    assert [b.span for b in steps] == [110.0, 140.0]
    assert [b.free for b in steps] == [10.0, 10.0]
    assert sum(b.free for b in steps) == whole.idle
    assert [b.compute for b in steps] == [90.0, 100.0]
    assert [b.communication for b in steps] == [20.0, 70.0]  # the all-reduce split at the window edge
    assert sum(b.busy for b in steps) == whole.busy


def test_real_traces_per_step_free_adds_to_at_most_the_idle_time(real_samples: Path) -> None:
    # the real traces' steps do not interleave on the device: launch assignment stands, results unchanged
    from streams.profiles.analysis.breakdown import device_windows, kernel_steps

    for name in ("nccl_parser_config_nccl_data.json.gz", "trace_filter_sampled_rank-0.json.gz",
                 "trace_filter_sampled_rank-1.json.gz"):
        p = parse_kineto(KINETO / name)
        steps = kernel_steps(p)
        assert device_windows(p.kernels, steps, len(p.steps)) is None
        per_step = step_breakdowns(p)
        assert sum(b.free for b in per_step) <= breakdown_of(p.kernels).idle
        for i, b in enumerate(per_step):
            assert b == breakdown_of(p.kernels.take(steps == i), p.steps[i].number, p.steps[i].ts)
