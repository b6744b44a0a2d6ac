"""The OOM forecast on synthetic memory series: a leak is caught >= 50 steps ahead; steady, noisy and sawtooth
memory is silent at any level; growth that stops resolves (one sample per second, a step of 1.2 s)."""

from __future__ import annotations

import numpy as np
import pytest

from streams.detect.rules import oom_forecast as oom

STEP_S = 1.2
PARAMS = oom.Params(horizon_s=200 * STEP_S, min_growth_per_s=0.01 / STEP_S)


def _alarms(series: np.ndarray, params: oom.Params = PARAMS) -> list[tuple[int, oom.Forecast]]:
    """(sample index, forecast) for every sample at which a series (one column per device) is forecast."""
    rows = np.atleast_2d(series.T).T if series.ndim == 1 else series
    state = None
    out = []
    for i in range(rows.shape[0]):
        state, fc = oom.evaluate(np.full(rows.shape[1], float(i)), rows[i], state, params)
        if len(fc):
            out.append((i, fc))
    return out


def _leak(rate_per_step: float, level: float, rng: np.random.Generator, start: int = 150) -> tuple[np.ndarray, float]:
    """Memory flat at `level` then growing `rate_per_step` from sample `start` (the job running a while: the
    forecast judges a device once it knows the level it held), clipped at 100; its out-of-memory time in
    samples."""
    t = np.arange(2000, dtype=np.float64)
    y = level + rate_per_step / STEP_S * np.maximum(t - start, 0) + rng.normal(0, 0.3, t.size)
    oom_at = start + (100.0 - level) / (rate_per_step / STEP_S)
    return np.minimum(y[: int(oom_at)], 100.0), oom_at


@pytest.mark.parametrize(("rate", "level"), [(0.05, 85.0), (0.05, 94.0), (0.1, 75.0), (0.2, 70.0), (0.3, 60.0)])
def test_a_steady_leak_is_caught_at_least_50_steps_ahead(rate: float, level: float) -> None:
    series, oom_at = _leak(rate, level, np.random.default_rng(int(rate * 100 + level)))
    found = _alarms(series)
    assert found, "never forecast"
    first, fc = found[0]
    lead_steps = (oom_at - first) / STEP_S
    assert lead_steps >= 50, lead_steps
    assert fc.index.tolist() == [0]
    assert fc.growth_per_s[0] * STEP_S == pytest.approx(rate, rel=0.5)
    # the forecast holds once made (one incident, not a flicker), at least while the device is under 98 %
    # (above, the samples' noise is clipped at 100 % and the growth looks slower)
    under = int(np.argmax(np.convolve(series, np.ones(9) / 9, "same") >= 98.0)) or series.size
    assert set(range(first, max(first, under))) <= {i for i, _ in found}
    # its time left shrinks towards the out-of-memory time
    last_i, last = found[-1]
    assert abs(last_i + last.seconds_left[0] - oom_at) < 0.2 * (oom_at - first)


def test_only_the_leaking_device_of_several_is_named() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(400, dtype=np.float64)[:, None]
    series = 80.0 + rng.normal(0, 0.3, (400, 8))
    series[:, 5] += 0.2 / STEP_S * np.maximum(t[:, 0] - 150, 0)
    found = _alarms(series)
    assert found and all(fc.index.tolist() == [5] for _, fc in found)


@pytest.mark.parametrize("level", [90.0, 95.0, 97.0, 99.0])
def test_high_but_steady_memory_says_nothing(level: float) -> None:
    series = np.minimum(level + np.random.default_rng(int(level)).normal(0, 0.3, (1500, 16)), 100.0)
    assert _alarms(series) == []


def test_noise_around_a_flat_level_says_nothing() -> None:
    series = np.minimum(94.0 + np.random.default_rng(7).normal(0, 2.0, (1500, 16)), 100.0)
    assert _alarms(series) == []


def test_a_per_step_sawtooth_says_nothing() -> None:
    """Activations allocated through each step and freed at its end, sampled once a second (aliased)."""
    t = np.arange(1500, dtype=np.float64)
    phase = (t / STEP_S) % 1.0
    series = 88.0 + 9.0 * phase + np.random.default_rng(5).normal(0, 0.3, t.size)
    assert _alarms(series) == []


@pytest.mark.parametrize("jump", [10.0, 26.0])
def test_a_step_up_is_no_leak(jump: float) -> None:
    """Memory that jumps once and holds (a bigger batch: spec §4's bad batch size, +26 % to ~96 %) is R1's, not
    a trend: wherever the jump falls in the window, at most two of its quarter-to-quarter slopes grow."""
    t = np.arange(400)
    series = 70.0 + jump * (t >= 100) + np.random.default_rng(int(jump)).normal(0, 0.3, (16, t.size))
    assert _alarms(series.T) == []


def test_growth_that_stops_resolves() -> None:
    rng = np.random.default_rng(9)
    grow = 80.0 + 0.1 / STEP_S * np.arange(150)
    series = np.concatenate([np.full(150, 80.0), grow, np.full(300, grow[-1])]) + rng.normal(0, 0.3, 600)
    found = [i for i, _ in _alarms(series)]
    assert found and found[0] < 300, "the growth is forecast while it lasts"
    assert found[-1] < 300 + 60, f"still forecast {found[-1] - 300} samples after the growth stopped"


def test_a_ramp_that_flattens_is_no_leak() -> None:
    """A starting job's allocator fills memory over its first steps, then holds it."""
    ramp = np.concatenate([np.linspace(40.0, 95.0, 25), np.full(400, 95.0)])  # 25 samples: past the warm-up
    series = ramp + np.random.default_rng(4).normal(0, 0.3, ramp.size)
    assert _alarms(series) == []


def test_no_step_time_no_forecast() -> None:
    series, _ = _leak(0.3, 60.0, np.random.default_rng(1))  # caught with a step time (above)
    params = oom.Params(horizon_s=0.0, min_growth_per_s=float("inf"))
    assert _alarms(series, params) == []
