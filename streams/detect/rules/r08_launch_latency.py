"""R8 launch-latency shape (T15): uniformity CU = 1 − Σ|L − L̄| / (n·L̄) < 0.7.

The kernel summary carries the launch latency's mean L̄ and mean absolute deviation
(Σ|L − L̄|/n) per aggregate, so CU = 1 − mad/mean without raw records. Aggregates of fewer
than 2 kernels, or with a non-positive mean, give no verdict. Stateless.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    min_cu: float = 0.7


def uniformity(mean_us: FloatArray, mad_us: FloatArray) -> FloatArray:
    mean = as_array(mean_us)
    out: FloatArray = np.where(mean > 0, 1.0 - as_array(mad_us) / np.where(mean > 0, mean, 1.0), np.nan)
    return out


def evaluate(mean_us: FloatArray, mad_us: FloatArray, count: FloatArray, params: Params) -> Alarms:
    cu = uniformity(mean_us, mad_us)
    judged = np.isfinite(cu) & (as_array(count) >= 2)
    alarm = judged & (cu < params.min_cu)
    return Alarms.where(alarm, cu, np.ones(cu.size), np.full(cu.size, params.min_cu))
