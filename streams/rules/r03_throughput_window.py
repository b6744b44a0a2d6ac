"""R3 throughput window (D1, step throughput): x outside μ ± k·σ of its recent window.

The first `warmup` values of a series are skipped (W, 50–200); the window keeps the last
`length` values (L, 30–100, FIFO); with n < 2 values in the window there is no verdict;
σ is the sample standard deviation. Every value after warm-up enters the window, as the
spec says, so a lasting change becomes the new normal within L values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.rules.base import Alarms, FloatArray, IntArray, Ring, as_array


@dataclass(frozen=True, slots=True)
class Params:
    warmup: int = 50
    length: int = 50
    k: float = 3.0
    min_deviation: float = 0.0  # also require |x - mu| >= this x |mu| (a very stable series has a tiny sigma)


@dataclass(slots=True)
class State:
    seen: IntArray
    pos: IntArray
    buf: FloatArray


def evaluate(x: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    x = as_array(x)
    if state is None or state.seen.size != x.size:
        state = State(seen=np.zeros(x.size, dtype=np.int64), pos=np.zeros(x.size, dtype=np.int64),
                      buf=Ring.new(x.size, params.length))
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
    Ring.push(state.buf, state.pos, x, present & (state.seen >= params.warmup))
    state.seen = np.where(present, state.seen + 1, state.seen)
    return state, Alarms.where(alarm, x, mu, threshold)
