"""The fleet kernel benchmark: per-job medians, percentiles across jobs, shape and prior fallbacks."""

from __future__ import annotations

import numpy as np

from streams.model.kernels import KernelFlops, bench_for, fit_kernel_bench
from streams.model.reference import VENDOR_PEAK_FLOPS, ReferenceModels


def test_percentiles_across_job_medians() -> None:
    rng = np.random.default_rng(1)
    job_level = {f"job{j}": 200e12 + 10e12 * j for j in range(11)}  # 200 .. 300 TFLOP/s
    rows = [KernelFlops(job, "F2:1x2x3", "ascend-910b", level * (1 + rng.normal(0, 0.01)))
            for job, level in job_level.items() for _ in range(25)]
    rows += [KernelFlops("job0", "F2:1x2x3", "ascend-910b", 1e9)]  # one slow step: the median ignores it
    rows += [KernelFlops("job0", "F2:1x2x3", "ascend-910b", float("nan"))]
    benches = {(b.key, b.device_kind): b for b in fit_kernel_bench(rows)}
    b = benches[("F2:1x2x3", "ascend-910b")]
    assert b.jobs == 11 and b.source == "fleet"
    assert abs(b.p50 / 250e12 - 1) < 0.01
    assert abs(b.p10 / 210e12 - 1) < 0.02 and abs(b.p90 / 290e12 - 1) < 0.02
    assert ("F2", "ascend-910b") in benches  # the class over every shape


def test_bench_for_falls_back_from_shape_to_class_to_prior() -> None:
    rows = [KernelFlops("a", "F2:1x2x3", "nvidia-h100", 600e12), KernelFlops("b", "F2:4x5x6", "nvidia-h100", 700e12)]
    models = ReferenceModels(kernels=fit_kernel_bench(rows))
    exact = bench_for(models, "F2:1x2x3", "nvidia-h100")
    assert exact is not None and exact.p50 == 600e12
    other_shape = bench_for(models, "F2:7x8x9", "nvidia-h100")
    assert other_shape is not None and other_shape.key == "F2" and other_shape.p50 == 650e12
    prior = bench_for(models, "F1:1x1", "nvidia-h100")
    assert prior is not None and prior.source == "prior" and prior.p50 == VENDOR_PEAK_FLOPS["nvidia-h100"]
    assert bench_for(models, "F1:1x1", "unknown-device") is None
