"""R2 CUSUM drift (T1, T2, T6, ...): slow drifts a static bound misses.

μ0, σ0 come from the first `history` samples of each series (steady state);
z_t = (x_t − μ0)/σ0, S⁺_t = max(0, S⁺_{t−1} + z_t − k), S⁻_t = max(0, S⁻_{t−1} − z_t − k),
S_0 = 0; alarm when S⁺ or S⁻ > h, then both reset to 0. σ0 is floored at
`sigma_floor` x |μ0|, `sigma_min` and 1e-9 so a constant or very smooth history does not
make every tenth of a degree an alarm; the first `warmup` samples (a starting job heating
up) are skipped before the history starts (n counts up from -warmup).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    k: float = 0.5
    h: float = 5.0
    history: int = 30
    sigma_floor: float = 0.01
    sigma_min: float = 0.0   # absolute floor of sigma0 in the metric's unit (smooth metrics have a tiny sigma)
    warmup: int = 0          # samples skipped before the steady-state history starts


@dataclass(slots=True)
class State:
    n: IntArray
    total: FloatArray
    total_sq: FloatArray
    s_pos: FloatArray
    s_neg: FloatArray


def _new(size: int, warmup: int = 0) -> State:
    z = np.zeros(size)
    return State(n=np.full(size, -warmup, dtype=np.int64), total=z.copy(), total_sq=z.copy(), s_pos=z.copy(),
                 s_neg=z.copy())


def baseline(state: State, params: Params) -> tuple[FloatArray, FloatArray]:
    n = np.maximum(np.minimum(state.n, params.history), 1)
    mu = state.total / n
    var = np.where(n > 1, (state.total_sq - n * mu * mu) / np.maximum(n - 1, 1), 0.0)
    sigma = np.maximum(np.sqrt(np.maximum(var, 0.0)),
                       np.maximum(np.maximum(params.sigma_floor * np.abs(mu), params.sigma_min), 1e-9))
    return mu, sigma


def evaluate(x: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    x = as_array(x)
    if state is None or state.n.size != x.size:
        state = _new(x.size, params.warmup)
    present = np.isfinite(x)
    warming = present & (state.n < 0)
    state.n = np.where(warming, state.n + 1, state.n)
    present = present & ~warming
    learning = present & (state.n < params.history)
    state.total = np.where(learning, state.total + np.nan_to_num(x), state.total)
    state.total_sq = np.where(learning, state.total_sq + np.nan_to_num(x) ** 2, state.total_sq)
    ready = present & (state.n >= params.history)
    state.n = np.where(present, state.n + 1, state.n)
    mu, sigma = baseline(state, params)
    z = np.where(ready, (np.nan_to_num(x) - mu) / sigma, 0.0)
    state.s_pos = np.where(ready, np.maximum(0.0, state.s_pos + z - params.k), state.s_pos)
    state.s_neg = np.where(ready, np.maximum(0.0, state.s_neg - z - params.k), state.s_neg)
    alarm = ready & ((state.s_pos > params.h) | (state.s_neg > params.h))
    state.s_pos = np.where(alarm, 0.0, state.s_pos)
    state.s_neg = np.where(alarm, 0.0, state.s_neg)
    threshold = np.where(np.nan_to_num(x) >= mu, mu + params.h * sigma, mu - params.h * sigma)
    return state, Alarms.where(alarm, x, mu, threshold)
