"""The three-region curve fit: recovers a known curve, predicts held-out sizes, survives degenerate input."""

from __future__ import annotations

import numpy as np

from streams.model.collectives import fit_curve, geomean_error
from streams.model.reference import CollectiveCurve, FloatArray

TRUE = CollectiveCurve("allreduce", "intra", 8, t_s_ns=20e3, m1=64e3, m2=32e6, bw_max=100.0,
                       sig_l=1.5, sig_x0=6.0, sig_k=2.0, sig_b=0.5)


def _samples(sizes: FloatArray, noise: float, seed: int = 0) -> FloatArray:
    rng = np.random.default_rng(seed)
    return TRUE.time_ns(sizes) * np.exp(rng.normal(0.0, noise, sizes.size))


def test_recovers_known_curve_from_noisy_samples() -> None:
    sizes = np.repeat(2.0 ** np.arange(8, 31), 5).astype(np.float64)
    c = fit_curve("allreduce", "intra", 8, sizes, _samples(sizes, 0.03))
    assert c.samples == sizes.size
    assert abs(c.t_s_ns / TRUE.t_s_ns - 1) < 0.05
    assert abs(c.bw_max / TRUE.bw_max - 1) < 0.05
    assert 0.01 < c.fit_error < 0.05  # the 3 % noise, not less (no overfit), not much more
    # held-out sizes between the sampled ones, compared with the noiseless truth
    held = (2.0 ** (np.arange(8, 30) + 0.5)).astype(np.float64)
    assert geomean_error(c.time_ns(held), TRUE.time_ns(held)) < 0.04


def test_only_large_messages_give_latency_plus_bandwidth() -> None:
    sizes = (2.0 ** np.arange(27, 31)).astype(np.float64)
    c = fit_curve("allreduce", "inter", 8, sizes, TRUE.time_ns(sizes))
    assert abs(c.bw_max / TRUE.bw_max - 1) < 1e-6
    assert abs(c.expected_ns(4e9) / TRUE.expected_ns(4e9) - 1) < 1e-6


def test_only_small_messages_predict_larger_ones_slow_not_free() -> None:
    sizes = (2.0 ** np.arange(8, 15)).astype(np.float64)
    c = fit_curve("allreduce", "inter", 8, sizes, TRUE.time_ns(sizes))
    assert abs(c.expected_ns(1e3) / TRUE.t_s_ns - 1) < 0.01
    # a bandwidth never observed: a large message costs at least its true time, never ~t_s
    assert c.expected_ns(1e8) >= TRUE.expected_ns(1e8)


def test_few_points_and_bad_samples() -> None:
    one = fit_curve("allgather", "inter", 4, [1e6, np.nan, -1.0], [50e3, 1.0, 2.0])
    assert one.samples == 1
    assert abs(one.expected_ns(1e6) / 50e3 - 1) < 1e-6
    two = fit_curve("allgather", "inter", 4, [1e6, 4e6], [50e3, 90e3])
    assert abs(two.expected_ns(1e6) / 50e3 - 1) < 1e-6 and abs(two.expected_ns(4e6) / 90e3 - 1) < 1e-6
    empty = fit_curve("allgather", "inter", 4, [], [])
    assert empty.samples == 0 and np.isnan(empty.expected_ns(1e6))


def test_geomean_error_is_symmetric() -> None:
    assert abs(geomean_error(np.array([1.1]), np.array([1.0])) - 0.1) < 1e-9
    assert abs(geomean_error(np.array([1.0]), np.array([1.1])) - 0.1) < 1e-9
