"""R4 kernel efficiency (F1–F4, B1–B3): R = P / P_bench outside the IQR fences of recent ratios.

P_bench per series (a (kernel, shape) key) is configured, or learned as the median FLOP/s of
the series' first `bench_samples` samples. Over the last N ratios (N = 100): Q1, Q3,
IQR = Q3 − Q1; anomaly when R < Q1 − 1.5·IQR or R > Q3 + 1.5·IQR. Fewer than `min_history`
ratios: no verdict. `cross_section` applies the same fences across the ranks of one step,
which names the rank whose kernel is slow (a degraded chip) without per-rank history.

P of a kernel in a step is the work the model needs from it over the device time it took:
FLOPs per call (spec §1's shape formula) x the calls per step the model makes, over the total
device time of the step's calls. `model_calls` learns those calls per step per series (the
median of its first `samples` counts: a static-shape training step launches a kernel of one
shape the same number of times every step). Repeated work (backward x2, FA-grad run twice:
spec §4 "redundant gradient compute", a row for R4) doubles T for the same model FLOPs, so P
halves; FLOPs counted per launched call would double with T and hide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import Alarms, FloatArray, IntArray, Ring, as_array, nanmedian_rows


@dataclass(frozen=True, slots=True)
class Params:
    history: int = 100
    iqr_k: float = 1.5
    bench_samples: int = 20
    min_history: int = 8
    p_bench: float = 0.0  # FLOP/s; 0 = learn per series
    min_deviation: float = 0.0  # also require |R - median| >= this (relative): fences on tight data are tight


@dataclass(slots=True)
class State:
    bench_n: IntArray
    bench_buf: FloatArray
    bench: FloatArray
    pos: IntArray
    buf: FloatArray


@dataclass(slots=True)
class Calls:
    """Per series: counts seen while learning, and the learned calls per step (NaN: learning)."""

    n: IntArray
    buf: FloatArray
    ref: FloatArray


def model_calls(count: FloatArray, state: Calls | None, samples: int) -> tuple[Calls, FloatArray]:
    """The calls per step the model makes, per series: learned as the median of the first `samples`
    counts (>= 1) of each series, then frozen. While a series learns, its current count is returned."""
    count = as_array(count)
    n = count.size
    if state is None or state.ref.size != n:
        state = Calls(n=np.zeros(n, dtype=np.int64), buf=Ring.new(n, max(samples, 1)), ref=np.full(n, np.nan))
    present = np.isfinite(count) & (count >= 1)
    learning = present & ~np.isfinite(state.ref)
    Ring.push(state.buf, state.n, count, learning)
    done = learning & (state.n >= max(samples, 1))
    if done.any():
        state.ref[done] = nanmedian_rows(state.buf[done])
    out: FloatArray = np.where(np.isfinite(state.ref), state.ref, count)
    return state, out


def fences(values: FloatArray, k: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per row: (median, lower fence, upper fence)."""
    q1, med, q3 = np.nanpercentile(values, (25, 50, 75), axis=-1)
    iqr = q3 - q1
    return med, q1 - k * iqr, q3 + k * iqr


def evaluate(p: FloatArray, state: State | None, params: Params) -> tuple[State, Alarms]:
    p = as_array(p)
    n = p.size
    if state is None or state.bench.size != n:
        bench = np.full(n, params.p_bench if params.p_bench > 0 else np.nan)
        state = State(bench_n=np.zeros(n, dtype=np.int64), bench_buf=Ring.new(n, params.bench_samples),
                      bench=bench, pos=np.zeros(n, dtype=np.int64), buf=Ring.new(n, params.history))
    present = np.isfinite(p) & (p > 0)
    learning = present & ~np.isfinite(state.bench)
    Ring.push(state.bench_buf, state.bench_n, p, learning)
    done = learning & (state.bench_n >= params.bench_samples)
    if done.any():
        state.bench[done] = nanmedian_rows(state.bench_buf[done])
    ready = present & np.isfinite(state.bench) & ~done
    ratio = np.where(ready, p / np.where(np.isfinite(state.bench), state.bench, 1.0), np.nan)
    counted = np.sum(np.isfinite(state.buf), axis=1)
    judged = ready & (counted >= params.min_history)
    med = np.full(n, np.nan)
    lo = np.full(n, np.nan)
    hi = np.full(n, np.nan)
    if judged.any():
        med[judged], lo[judged], hi[judged] = fences(state.buf[judged], params.iqr_k)
    big = np.abs(ratio - np.nan_to_num(med)) >= params.min_deviation * np.abs(np.nan_to_num(med))
    alarm = judged & ((ratio < lo) | (ratio > hi)) & big
    threshold = np.where(ratio < med, lo, hi)
    Ring.push(state.buf, state.pos, ratio, ready)
    return state, Alarms.where(alarm, ratio, med, threshold)


def cross_section(ratio: FloatArray, k: float = 1.5, min_n: int = 4, min_deviation: float = 0.0) -> Alarms:
    """The same IQR fences across series of one instant (e.g. every rank's ratio in one step)."""
    ratio = as_array(ratio)
    ok = np.isfinite(ratio)
    if ok.sum() < min_n:
        return Alarms.none()
    med, lo, hi = fences(ratio[ok], k)
    big = np.abs(np.nan_to_num(ratio) - med) >= min_deviation * abs(med)
    alarm = ok & ((ratio < lo) | (ratio > hi)) & big
    return Alarms.where(alarm, ratio, np.full(ratio.size, med), np.where(ratio < med, lo, hi))
