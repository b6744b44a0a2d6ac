"""The steady soak's memory verdict (bench.soak.growth_mb_per_hour): the slope over a worker's
second half, so warm-up and the first jobs' caches do not read as a leak (pure)."""

from __future__ import annotations

import pytest

from bench.soak import growth_mb_per_hour


def test_a_flat_worker_after_warm_up_grows_zero() -> None:
    series = [(60.0 * i, 300.0 if i < 5 else 420.0) for i in range(20)]  # caches fill in the first minutes
    assert growth_mb_per_hour(series) == 0.0


def test_a_leak_is_its_slope_per_hour() -> None:
    series = [(60.0 * i, 400.0 + 0.5 * i) for i in range(30)]  # 0.5 MB a minute
    assert growth_mb_per_hour(series) == pytest.approx(30.0)


def test_too_short_a_series_says_nothing() -> None:
    assert growth_mb_per_hour([(60.0 * i, 400.0) for i in range(4)]) is None
    assert growth_mb_per_hour([]) is None
