"""The benchmark statistics helpers on hand-made samples whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from bench.overhead import abba_quads, abba_steady_ratios, analyse, rounds_of, wall_clock_verdict
from bench.stats import Estimate, cost_ratio, median_ci, paired_ratio_ci, ratio_of_medians_ci


def test_median_ci_of_constant_values_is_a_point() -> None:
    e = median_ci([3.0] * 25)
    assert (e.value, e.lo, e.hi, e.half_width) == (3.0, 3.0, 3.0, 0.0)


def test_median_ci_covers_the_true_median_and_narrows_with_more_data() -> None:
    rng = np.random.default_rng(42)
    small = median_ci(rng.normal(10.0, 1.0, 50), seed=1)
    large = median_ci(rng.normal(10.0, 1.0, 5000), seed=1)
    assert small.lo <= 10.0 <= small.hi and large.lo <= 10.0 <= large.hi
    assert large.half_width < small.half_width / 4  # ~ 1/sqrt(n): 10x the spread of 100x the data
    assert small.lo <= small.value <= small.hi


def test_median_ci_is_reproducible_per_seed() -> None:
    x = [1.0, 5.0, 2.0, 8.0, 3.0, 9.0, 4.0]
    assert median_ci(x, seed=3) == median_ci(x, seed=3)
    assert median_ci(x).value == 4.0


def test_ratio_of_exactly_scaled_rounds_is_exact() -> None:
    rng = np.random.default_rng(0)
    den = [list(rng.uniform(30, 50, 4)) for _ in range(40)]
    num = [[1.25 * x for x in block] for block in den]
    e = ratio_of_medians_ci(num, den)
    assert e.value == pytest.approx(1.25) and e.lo == pytest.approx(1.25) and e.hi == pytest.approx(1.25)
    p = paired_ratio_ci(num, den)
    assert p.value == pytest.approx(1.25) and p.half_width == pytest.approx(0.0, abs=1e-12)


def test_paired_ratio_cancels_drift_that_widens_the_pooled_interval() -> None:
    # the machine slows down 3x over the run; both modes see the same drift, hook costs +1 %
    rng = np.random.default_rng(5)
    drift = np.linspace(1.0, 3.0, 60)
    den = [list(40 * d * rng.normal(1.0, 0.002, 3)) for d in drift]
    num = [list(40 * 1.01 * d * rng.normal(1.0, 0.002, 3)) for d in drift]
    pooled = ratio_of_medians_ci(num, den, seed=2)
    paired = paired_ratio_ci(num, den, seed=2)
    assert paired.lo <= 1.01 <= paired.hi and paired.half_width < 0.005
    assert pooled.half_width > 5 * paired.half_width


def test_ratio_handles_blocks_of_unequal_length() -> None:
    den = [[10.0, 10.0, 10.0], [10.0, 10.0]]
    num = [[20.0], [20.0, 20.0, 20.0]]
    assert ratio_of_medians_ci(num, den).value == pytest.approx(2.0)


def test_mismatched_or_empty_rounds_are_rejected() -> None:
    with pytest.raises(ValueError):
        ratio_of_medians_ci([[1.0]], [[1.0], [2.0]])
    with pytest.raises(ValueError):
        paired_ratio_ci([], [])
    with pytest.raises(ValueError):
        median_ci([])


def test_cost_ratio_bounds_come_from_both_intervals() -> None:
    e = cost_ratio(Estimate(10.0, 8.0, 12.0), Estimate(40.0, 20.0, 80.0))  # µs per step, ms per step
    assert e.value == pytest.approx(1 + 10 / 40_000)
    assert e.lo == pytest.approx(1 + 8 / 80_000) and e.hi == pytest.approx(1 + 12 / 20_000)


def test_rounds_drop_warm_up_mode_switch_steps_and_incomplete_rounds() -> None:
    modes = ("none", "hook", "profiler")
    times: list[tuple[str, float]] = []
    order = [modes, modes[1:] + modes[:1], modes[2:] + modes[:2]]
    for r in range(3):
        for m in order[r]:
            times += [(m, 100.0 * (r + 1))] + [(m, float(r * 10 + k)) for k in range(2)]
    times += [("none", 1.0)] * 3  # a trailing incomplete round
    rounds = rounds_of(times, 3, modes)
    assert len(rounds) == 2  # round 0 is warm-up, the incomplete one is dropped
    assert rounds[0] == {m: [10.0, 11.0] for m in modes} and rounds[1] == {m: [20.0, 21.0] for m in modes}


def test_ablation_modes_get_their_own_ratio_from_the_same_rounds() -> None:
    from producers.workloads.ddp_transformer import WorkloadConfig, mode_of

    modes = ("none", "hook", "profiler", "hook_pycomm")
    slow = {"none": 1.0, "hook": 1.0, "profiler": 1.5, "hook_pycomm": 1.2}  # true ratios, by construction
    cfg = WorkloadConfig(job="j", schedule=modes, block=3, steps=3 * len(modes) * 30)
    rng = np.random.default_rng(3)
    times = [(mode_of(i, cfg), 20.0 * slow[mode_of(i, cfg)] * rng.uniform(0.98, 1.02)) for i in range(cfg.steps)]
    # every round runs each mode once, in a rotated order
    assert [mode_of(i * 3, cfg) for i in range(8)] == ["none", "hook", "profiler", "hook_pycomm",
                                                      "hook", "profiler", "hook_pycomm", "none"]
    stats = analyse(times, 3, modes)
    assert stats["rounds"] == 29 and set(stats["steps_per_mode"]) == set(modes)
    for m in modes[1:]:
        e = stats[f"{m}_ratio"]
        assert e.lo <= slow[m] <= e.hi and e.hi - e.lo < 0.03


def test_abba_quads_pair_each_quads_hook_steps_with_its_none_steps() -> None:
    from producers.workloads.ddp_transformer import WorkloadConfig, mode_of

    cfg = WorkloadConfig(job="j", schedule=("none", "hook"), block=1, steps=40)
    assert [mode_of(i, cfg) for i in range(8)] == ["none", "hook", "hook", "none"] * 2
    # drift: every step 1 % slower than the one before; the hook adds 0.5 % on top
    times = [(mode_of(i, cfg), 50.0 * 1.01**i * (1.005 if mode_of(i, cfg) == "hook" else 1.0)) for i in range(38)]
    hook_q, none_q = abba_quads(times, warm_steps=6)
    assert len(hook_q) == len(none_q) == 7  # quads from step 8 (6 rounded up), the last partial quad dropped
    assert none_q[0] == [times[8][1], times[11][1]] and hook_q[0] == [times[9][1], times[10][1]]
    ratios = [sum(h) / sum(n) for h, n in zip(hook_q, none_q, strict=True)]
    assert all(abs(r - 1.005) < 0.001 for r in ratios)  # ABBA cancels the linear drift

    # steady steps: the second hook step of each quad against the second none steps around it
    steady = abba_steady_ratios(times, warm_steps=6)
    assert len(steady) == 7 and all(abs(r - 1.005 * 1.01**2 / ((1 + 1.01**4) / 2)) < 1e-9 for r in steady)


@pytest.mark.parametrize(("lo", "hi", "resolved", "starts"), [
    (1.002, 1.01, True, "target missed"),
    (0.999, 1.0008, True, "target met"),
    (0.995, 1.004, False, "not resolved"),
])
def test_the_interval_alone_settles_the_overhead_target(lo: float, hi: float, resolved: bool, starts: str) -> None:
    ok, text = wall_clock_verdict(Estimate((lo + hi) / 2, lo, hi), "context")
    assert ok is resolved and text.startswith(starts) and text.endswith("context")
