"""R10 inter-step CPU share: T_interstep / T_step well above its own history.

ratio = T_interstep / T_step. Anomaly when ratio > `severe` (the scenario table: > 50 % is
severe), or, after `warmup` values, when ratio > median + k x 1.4826 x MAD of the
series' last `length` ratios AND ratio > `min_ratio` (a jump from 1 % to 3 % is noise,
not a CPU problem). Alarming values do not enter the history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, Ring, as_array, nanmedian_rows


@dataclass(frozen=True, slots=True)
class Params:
    severe: float = 0.5
    k: float = 5.0
    min_ratio: float = 0.1
    warmup: int = 10
    length: int = 50


@dataclass(slots=True)
class State:
    pos: IntArray
    buf: FloatArray


def share(t_inter: FloatArray, t_step: FloatArray) -> FloatArray:
    t = as_array(t_step)
    out: FloatArray = np.where(t > 0, as_array(t_inter) / np.where(t > 0, t, 1.0), np.nan)
    return out


def evaluate(ratio: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    ratio = as_array(ratio)
    if state is None or state.pos.size != ratio.size:
        state = State(pos=np.zeros(ratio.size, dtype=np.int64), buf=Ring.new(ratio.size, params.length))
    present = np.isfinite(ratio)
    counted = np.sum(np.isfinite(state.buf), axis=1)
    has = counted >= params.warmup
    med = np.full(ratio.size, np.nan)
    mad = np.full(ratio.size, np.nan)
    if has.any():
        rows = state.buf[has]
        med[has] = nanmedian_rows(rows)
        mad[has] = nanmedian_rows(np.abs(rows - med[has][:, None]))
    limit = np.maximum(med + params.k * 1.4826 * mad, params.min_ratio)
    severe = present & (ratio > params.severe)
    drift = present & has & (ratio > limit)
    alarm = severe | drift
    threshold = np.where(drift, limit, params.severe)
    Ring.push(state.buf, state.pos, ratio, present & ~alarm)
    return state, Alarms.where(alarm, ratio, med, threshold)
