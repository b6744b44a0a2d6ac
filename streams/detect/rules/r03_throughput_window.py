"""R3 throughput window (D1, step throughput): x outside μ ± k·σ of its recent window.

The first `warmup` values of a series are skipped (W, 50–200); the window keeps the last
`length` values (L, 30–100, FIFO); with n < 2 values in the window there is no verdict;
σ is the sample standard deviation. A value that alarms is held out of the window: one
faulty value in a window of a stable series widens σ so much that the next faulty value
passes, so a fault would alarm once and fall silent. A series that alarms `adapt_after`
times in a row has shifted (a config change, a new data set): its window restarts from
those held values, so a lasting change becomes the new normal instead of an endless alarm.
`adapt_after` = 0 puts every value in the window (the bare FIFO).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, Ring, as_array


@dataclass(frozen=True, slots=True)
class Params:
    warmup: int = 50
    length: int = 50
    k: float = 3.0
    min_deviation: float = 0.0  # also require |x - mu| >= this x |mu| (a very stable series has a tiny sigma)
    adapt_after: int = 50  # consecutive alarms after which the held values become the window (0 = no hold-out)


@dataclass(slots=True)
class State:
    seen: IntArray
    pos: IntArray
    buf: FloatArray
    run: IntArray  # consecutive alarms
    held: FloatArray  # the values of the current alarm run, oldest first


def _new(n: int, params: Params) -> State:
    return State(seen=np.zeros(n, dtype=np.int64), pos=np.zeros(n, dtype=np.int64), buf=Ring.new(n, params.length),
                 run=np.zeros(n, dtype=np.int64), held=Ring.new(n, max(params.adapt_after, 1)))


def evaluate(x: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    x = as_array(x)
    if state is None or state.seen.size != x.size:
        state = _new(x.size, params)
    present = np.isfinite(x)
    counted = np.sum(np.isfinite(state.buf), axis=1)
    judged = present & (state.seen >= params.warmup) & (counted >= 2)
    mu = np.full(x.size, np.nan)
    sigma = np.full(x.size, np.nan)
    if judged.any():
        rows = state.buf[judged]
        mu[judged] = np.nanmean(rows, axis=1)
        sigma[judged] = np.nanstd(rows, axis=1, ddof=1)
    dev = np.abs(np.nan_to_num(x) - np.nan_to_num(mu))
    alarm = judged & (dev > params.k * np.nan_to_num(sigma)) & (dev >= params.min_deviation * np.abs(
        np.nan_to_num(mu)))
    threshold = np.where(np.nan_to_num(x) >= np.nan_to_num(mu), mu + params.k * sigma, mu - params.k * sigma)
    enter = present & (state.seen >= params.warmup)
    if params.adapt_after > 0:
        rows_alarm = np.flatnonzero(alarm)
        state.held[rows_alarm, np.minimum(state.run[rows_alarm], params.adapt_after - 1)] = x[rows_alarm]
        state.run = np.where(alarm, state.run + 1, np.where(present, 0, state.run))
        shifted = np.flatnonzero(alarm & (state.run >= params.adapt_after))
        if shifted.size:
            m = min(params.adapt_after, params.length)
            state.buf[shifted] = np.nan
            state.buf[shifted, :m] = state.held[shifted, params.adapt_after - m:params.adapt_after]
            state.pos[shifted] = m
            state.run[shifted] = 0
        state.held[present & ~alarm] = np.nan
        enter = enter & ~alarm
    Ring.push(state.buf, state.pos, x, enter)
    state.seen = np.where(present, state.seen + 1, state.seen)
    return state, Alarms.where(alarm, x, mu, threshold)
