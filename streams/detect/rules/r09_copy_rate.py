"""R9 copy rate (T9–T14): H2D / D2H rate in GB/s outside a band.

rate = bytes / T (bytes per ns = GB/s). The band is configured ([low, high] GB/s); a side
left at 0 is learned instead: `learned_low` x / `learned_high` x the median of the
series' own last `length` rates (after `warmup` rates), because rated copy bandwidth
differs by machine. Alarming rates do not enter the history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, Ring, as_array, nanmedian_rows


@dataclass(frozen=True, slots=True)
class Params:
    low: float = 0.0
    high: float = 0.0
    learned_low: float = 0.7
    learned_high: float = 2.0
    warmup: int = 10
    length: int = 50


@dataclass(slots=True)
class State:
    pos: IntArray
    buf: FloatArray


def rate_gbps(nbytes: FloatArray, total_ns: FloatArray) -> FloatArray:
    t = as_array(total_ns)
    out: FloatArray = np.where(t > 0, as_array(nbytes) / np.where(t > 0, t, 1.0), np.nan)
    return out


def evaluate(rate: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    rate = as_array(rate)
    if state is None or state.pos.size != rate.size:
        state = State(pos=np.zeros(rate.size, dtype=np.int64), buf=Ring.new(rate.size, params.length))
    present = np.isfinite(rate)
    counted = np.sum(np.isfinite(state.buf), axis=1)
    med = np.full(rate.size, np.nan)
    has = counted >= params.warmup
    if has.any():
        med[has] = nanmedian_rows(state.buf[has])
    low = np.full(rate.size, params.low) if params.low > 0 else params.learned_low * med
    high = np.full(rate.size, params.high) if params.high > 0 else params.learned_high * med
    below = present & np.isfinite(low) & (rate < low)
    above = present & np.isfinite(high) & (rate > high)
    alarm = below | above
    Ring.push(state.buf, state.pos, rate, present & ~alarm)
    return state, Alarms.where(alarm, rate, med, np.where(below, low, high))
