"""R1 static bounds (T1–T8): anomaly when a value lies outside [L, U] for k consecutive samples.

A NaN bound means "no bound on that side". The alarm holds for every sample from the k-th
consecutive one on; a sample back inside resets the run; a missing sample (NaN) keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.rules.base import Alarms, FloatArray, IntArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    lower: float = float("nan")
    upper: float = float("nan")
    k: int = 3


@dataclass(slots=True)
class State:
    run: IntArray


def evaluate(x: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    x = as_array(x)
    if state is None or state.run.size != x.size:
        state = State(run=np.zeros(x.size, dtype=np.int64))
    present = np.isfinite(x)
    outside = present & (((x < params.lower) if np.isfinite(params.lower) else False)
                         | ((x > params.upper) if np.isfinite(params.upper) else False))
    state.run = np.where(outside, state.run + 1, np.where(present, 0, state.run))
    alarm = outside & (state.run >= params.k)
    bound = np.where((x > params.upper) if np.isfinite(params.upper) else False, params.upper, params.lower)
    mid = np.full(x.size, np.nan)
    return state, Alarms.where(alarm, x, mid, bound)
