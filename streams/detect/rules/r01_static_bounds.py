"""R1 static bounds (T1–T8): anomaly when a value lies outside [L, U] for k consecutive samples.

A NaN bound means "no bound on that side". The alarm holds for every sample from the k-th
consecutive one on; a sample back inside resets the run; a missing sample (NaN) keeps it.

`active` (optional, per series) says where the LOWER bound applies: a lower bound on a
utilisation (AI Core, memory bandwidth, clock) describes a device that should be busy and is
not; while the job itself is idle (a checkpoint, an evaluation pause) every device is under
it and nothing is wrong, so there a sample below L counts as inside (it resets the run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, BoolArray, FloatArray, IntArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    lower: float = float("nan")
    upper: float = float("nan")
    k: int = 3


@dataclass(slots=True)
class State:
    run: IntArray


def evaluate(x: FloatArray, state: State | None, params: Params,
             active: BoolArray | bool = True) -> tuple[State, Alarms]:
    x = as_array(x)
    if state is None or state.run.size != x.size:
        state = State(run=np.zeros(x.size, dtype=np.int64))
    present = np.isfinite(x)
    below = (x < params.lower) & np.broadcast_to(np.asarray(active, dtype=bool), x.shape) \
        if np.isfinite(params.lower) else np.zeros(x.size, dtype=bool)
    above = (x > params.upper) if np.isfinite(params.upper) else np.zeros(x.size, dtype=bool)
    outside = present & (below | above)
    state.run = np.where(outside, state.run + 1, np.where(present, 0, state.run))
    alarm = outside & (state.run >= params.k)
    bound = np.where(above, params.upper, params.lower)
    mid = np.full(x.size, np.nan)
    return state, Alarms.where(alarm, x, mid, bound)
