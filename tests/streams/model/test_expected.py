"""Expected vs observed per component of a step: the parts `steplens perf --breakdown` prints."""

from __future__ import annotations

import math

import numpy as np

from streams.model.collectives import fit_curve
from streams.model.expected import expected_vs_observed
from streams.model.kernels import KernelFlops, fit_kernel_bench
from streams.model.reference import ReferenceModels
from streams.model.step_time import SummaryStep, predict_summary_step


def _models() -> ReferenceModels:
    sizes = np.geomspace(1e6, 1e9, 12)
    curve = fit_curve("allreduce", "inter", 2, sizes, 20e3 + sizes / 10.0)  # 10 GB/s
    return ReferenceModels(version=7, curves=(curve,),
                           kernels=fit_kernel_bench([KernelFlops("j", "F2:1x1x1", "nvidia-h100", 500e12)]))


def _step(flops: float, dp_ns: float, device_kind: str = "nvidia-h100") -> SummaryStep:
    """Two ranks: 20 ms of compute each, 4 DP all-reduce calls of 20 MB in the step's tail."""
    world = 2
    return SummaryStep(
        device_kind=device_kind, step_ms=32.0 + dp_ns / 4e6 + 1.0, busy_ms=np.array([30.0, 32.0]),
        host_ms=np.full(world, 1.0), rank=np.repeat(np.arange(world), 2), key=["F2:1x1x1", "allreduce/dp"] * world,
        cat=["compute", "comm"] * world, count=np.tile([10.0, 4.0], world), total_ns=np.tile([20e6, dp_ns], world),
        flops=np.tile([flops, 0.0], world), nbytes=np.tile([0.0, 80e6], world), op=[None, "allreduce"] * world,
        link=[None, "inter"] * world, group_size=np.tile([0, world], world).astype(np.int64),
        in_phase=np.tile([True, False], world), transfer_ns=np.tile([np.nan, dp_ns], world))


def test_parts_follow_the_composition_and_name_the_slow_collective() -> None:
    models = _models()
    # the DP all-reduce at 3x its expected 4 x (20 µs + 2 ms) = 8.08 ms
    s = _step(10e12, dp_ns=3 * 8.08e6)
    e = expected_vs_observed(s, models)
    by = {p.component: p for p in e.parts}
    assert e.version == 7 and e.parts[0].component == "step"
    pred = predict_summary_step(s, models)
    assert by["step"].expected_ms == pred.expected.step_ms and by["step"].observed_ms == s.step_ms
    assert math.isclose(by["compute"].expected_ms, 20.0) and math.isclose(by["compute"].ratio, 1.0)
    dp = by["comm:allreduce/dp"]
    assert math.isclose(dp.expected_ms, 8.08, rel_tol=1e-3) and math.isclose(dp.ratio, 3.0, rel_tol=1e-3)
    assert dp.text.startswith("DP all-reduce 20 MB on inter-host RDMA (2 ranks, 4 calls/step)")
    assert e.worst is dp
    assert "DP all-reduce 20 MB on inter-host RDMA" in e.summary() and "3.0x its expected time" in e.summary()
    assert by["host/data"].ratio == 1.0 and not by["host/data"].modelled
    # exposed comm: the ranks' mean (step - busy), rank 0's 2 ms wait for rank 1 included, as composed
    assert by["exposed comm"].expected_ms == pred.expected.comm_exposed_ms and by["exposed comm"].ratio > 2.0


def test_a_job_at_the_fleets_pace_names_nothing() -> None:
    e = expected_vs_observed(_step(10e12, dp_ns=8.08e6), _models())
    assert abs(e.step.ratio - 1.0) < 1e-3
    assert "its expected time" not in e.summary()


def test_slow_compute_is_the_worst_part() -> None:
    e = expected_vs_observed(_step(5e12, dp_ns=8.08e6), _models())  # half the fleet's FLOP/s: 2x
    assert e.worst is not None and e.worst.component == "compute" and math.isclose(e.worst.ratio, 2.0)
    assert "compute kernels" in e.summary()


def test_without_any_model_every_part_is_as_observed() -> None:
    """(a device kind with a vendor peak would still get its compute judged against that prior)"""
    e = expected_vs_observed(_step(10e12, dp_ns=8.08e6, device_kind="no-such-device"), ReferenceModels())
    assert e.worst is None and e.modelled_share == 0.0
    assert all(math.isclose(p.ratio, 1.0) for p in e.parts)
