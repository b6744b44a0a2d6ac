"""R7 minority-kernel gap: time the monitored kernels do not explain.

V = (T_step − T_interstep_cpu − Σ monitored kernel time) / (T_step − T_interstep_cpu);
anomaly when V is persistently above `bound` (the scenario table's 40 %: `k` consecutive
values) or jumps more than `jump` above the median of its last `length` values (after
`warmup` values) and above their upper quartile too. The quartile tells a rise from a
recovery: when the monitored kernels grow (eight times the gradient bytes, overlapped with
backward) V drops and its median follows; when that ends V returns to the level it held
before, which the window's upper quartile still holds, and a return is no anomaly.
Non-positive denominators give no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, Ring, as_array, nanmedian_rows


@dataclass(frozen=True, slots=True)
class Params:
    bound: float = 0.4
    k: int = 3
    jump: float = 0.15
    warmup: int = 10
    length: int = 50


@dataclass(slots=True)
class State:
    run: IntArray
    pos: IntArray
    buf: FloatArray


def gap(t_step: FloatArray, t_inter: FloatArray, t_monitored: FloatArray) -> FloatArray:
    denom = as_array(t_step) - np.nan_to_num(as_array(t_inter))
    out: FloatArray = np.where(denom > 0, (denom - as_array(t_monitored)) / np.where(denom > 0, denom, 1.0), np.nan)
    return out


def evaluate(v: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    v = as_array(v)
    if state is None or state.run.size != v.size:
        state = State(run=np.zeros(v.size, dtype=np.int64), pos=np.zeros(v.size, dtype=np.int64),
                      buf=Ring.new(v.size, params.length))
    present = np.isfinite(v)
    above = present & (v > params.bound)
    state.run = np.where(above, state.run + 1, np.where(present, 0, state.run))
    counted = np.sum(np.isfinite(state.buf), axis=1)
    med = np.full(v.size, np.nan)
    upper = np.full(v.size, np.nan)
    has = counted >= params.warmup
    if has.any():
        med[has] = nanmedian_rows(state.buf[has])
        upper[has] = np.nanpercentile(state.buf[has], 75, axis=1)
    jumped = present & has & (v - np.nan_to_num(upper) > params.jump)  # the upper quartile is >= the median
    alarm = (above & (state.run >= params.k)) | jumped
    threshold = np.where(jumped, upper + params.jump, params.bound)
    Ring.push(state.buf, state.pos, v, present & ~alarm)
    return state, Alarms.where(alarm, v, med, threshold)
