"""The three-region curve fit: recovers a known curve, predicts held-out sizes, survives degenerate input."""

from __future__ import annotations

import numpy as np

from schemas.bandwidth import bus_factor
from streams.model.collectives import expected_transfer_ns, fit_curve, fit_curves, geomean_error
from streams.model.reference import CollectiveCurve, FloatArray, ReferenceModels

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


def _ring(n: int, sizes: FloatArray) -> FloatArray:
    """A ring all-reduce of n ranks on TRUE's link: the link moves bus_factor x the message."""
    return TRUE.time_ns(sizes * bus_factor("allreduce", n))


def test_pooled_group_sizes_place_the_regions_one_size_cannot() -> None:
    # each group size ran two message sizes only (its jobs' gradient buckets): too few for 8 parameters
    one = {(("allreduce", "inter", n)): (np.repeat(m, 10), _ring(n, np.repeat(m, 10)))
           for n, m in ((2, np.array([2e5, 6e5])), (4, np.array([3e6, 9e6])), (8, np.array([5e7, 1.5e8])),
                        (16, np.array([4e8, 8e8])))}
    alone = ReferenceModels(curves=fit_curves(one, pool=False))
    pooled = ReferenceModels(curves=fit_curves(one))
    held = np.geomspace(1.2e5, 8e8, 25)  # inside what the pooled sizes span
    truth = _ring(8, held)

    def err(models: ReferenceModels) -> float:
        got = np.array([expected_transfer_ns(models, "allreduce", "inter", 8, float(m)) for m in held])
        return geomean_error(got, truth)

    assert err(pooled) < 0.1 < err(alone)
    c8 = next(c for c in pooled.curves if c.group_size == 8)
    assert c8.samples == 20 and c8.fit_error < 0.05  # its own samples, not the pooled ones


def test_unknown_group_size_scales_by_bus_factor() -> None:
    sizes = np.geomspace(1e3, 1e9, 30)
    models = ReferenceModels(curves=(fit_curve("allreduce", "intra", 8, sizes, _ring(8, sizes)),))
    got = expected_transfer_ns(models, "allreduce", "intra", 4, 4e8)
    assert abs(got / float(_ring(4, np.array([4e8]))[0]) - 1) < 0.03
    assert np.isnan(expected_transfer_ns(models, "alltoall", "intra", 4, 4e8))
