"""OOM forecast (issue #44 item 4): when a device's memory trend reaches its capacity, per device series.

A static bound on T6 fires minutes before a crash, when nothing can be done, and on healthy jobs
that keep HBM near full by design (caching allocators, large micro-batches). This reads the
trend instead: over the last `window` samples of each device, a least-squares slope with its
t statistic, and the slopes between the medians of consecutive quarters of the window (as Tukey's
resistant line does with thirds).
A device is forecast to run out when all of them say it grows: the fit is significant
(t >= `t_min`), every quarter-to-quarter slope is >= `min_growth_per_s` and the flattest at least
`steady_share` of the steepest (a steady creep, not a step, which raises at most two, nor a ramp that
flattens, which a starting job's allocator filling its cache is), the t statistic holds with the
samples' lag-1 autocorrelation accounted for (a slow wander has fewer independent samples), the
latest quarter's upper envelope makes a new high (above the highest sample that left the window by
more than the fit's scatter: an aliased per-step sawtooth or a wander revisits its old peak; so a
device is judged only once samples left its window), and
its upper envelope (the fit now plus the residuals' `envelope_q` quantile: a sawtooth runs out at
its peak) reaches `capacity_pct` within `horizon_s`. Steady memory at any level, noise around it
and a per-step sawtooth have no significant growth and say nothing. Once forecasting, a device
keeps its verdict while the fit still grows at half the thresholds (hysteresis: one incident, not
a flicker), and drops it when growth stops.

A device's first `warmup` samples are left out: a starting job's allocator fills its cache over its
first steps, a ramp that flattens (one longer than the warm-up looks like a leak while it climbs).
Time is in seconds of the samples' own clock (device samples are timed, not stepped); the caller
converts its horizon and growth floor from steps with the job's step time. NaN input = no sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.detect.rules.base import BoolArray, FloatArray, IntArray, as_array


@dataclass(frozen=True, slots=True)
class Params:
    horizon_s: float                # forecast a run-out at most this far ahead
    min_growth_per_s: float         # slower growth is no leak (percentage points per second)
    window: int = 48                # samples per device the trend is fitted on
    t_min: float = 6.0              # the least-squares slope's t statistic
    envelope_q: float = 0.9         # quantile of the residuals added to the fit: the level's upper envelope
    groups: int = 4                 # the window's groups whose medians' slopes must all grow
    steady_share: float = 0.3       # to open, the flattest of those slopes is at least this share of the steepest
    warmup: int = 20                # a device's first samples are left out (a starting job's allocator fills)
    every: int = 5                  # a device not forecasting is judged every this many of its samples
    high_margin: float = 1.0        # a new high: this many times the fit's scatter above what left the window
    capacity_pct: float = 100.0


@dataclass(slots=True)
class State:
    t: FloatArray      # (n, window) seconds since `origin`, NaN = empty
    y: FloatArray      # (n, window) memory %, NaN = empty
    pos: IntArray      # samples pushed per series
    seen: IntArray     # samples seen per series (the first `warmup` are not pushed)
    before: FloatArray  # the highest sample that left the window (-inf: none yet)
    active: BoolArray  # forecasting now (hysteresis)
    origin: float      # the first sample's time, seconds: keeps the fit's sums well conditioned


@dataclass(frozen=True, slots=True)
class Forecast:
    """The devices forecast to run out: their level now (upper envelope, %), growth (% per second) and
    seconds until the envelope reaches capacity (0 when it is there already)."""

    index: IntArray
    level: FloatArray
    growth_per_s: FloatArray
    seconds_left: FloatArray

    def __len__(self) -> int:
        return int(self.index.size)


def _new(n: int, params: Params, origin: float) -> State:
    return State(t=np.full((n, params.window), np.nan), y=np.full((n, params.window), np.nan),
                 pos=np.zeros(n, dtype=np.int64), seen=np.zeros(n, dtype=np.int64), active=np.zeros(n, dtype=bool),
                 origin=origin, before=np.full(n, -np.inf))


def evaluate(ts_s: FloatArray, x: FloatArray, state: State | None, params: Params) -> tuple[State, Forecast]:
    """Push one sample per series (`ts_s` its time in seconds, `x` its memory %, NaN = none) and forecast."""
    x, ts_s = as_array(x), np.broadcast_to(as_array(ts_s), as_array(x).shape)
    present = np.isfinite(x) & np.isfinite(ts_s)
    if state is None or state.pos.size != x.size or state.t.shape[1] != params.window:
        origin = float(np.min(ts_s[present])) if present.any() else 0.0
        state = _new(x.size, params, origin)
    state.seen[present] += 1
    present &= state.seen > params.warmup
    rows = np.flatnonzero(present)
    col = state.pos[rows] % params.window
    leaving = state.y[rows, col]
    state.before[rows] = np.fmax(state.before[rows], leaving)  # NaN (an empty slot) leaves it as it was
    state.t[rows, col] = ts_s[rows] - state.origin
    state.y[rows, col] = x[rows]
    state.pos[rows] += 1
    # a device is judged every `every` samples, the devices staggered (a trend moves slowly; at 10,240 devices
    # the fit costs tens of ms a tick), one forecasting already at every sample (its incident's evidence)
    turn = (state.pos + np.arange(x.size)) % max(params.every, 1) == 0
    # a device is judged once samples left its window: a leak is growth past what the device held before
    judged = np.flatnonzero(present & (state.pos > params.window) & (turn | state.active))
    empty = Forecast(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))
    if not judged.size:
        return state, empty
    was = state.active[judged]
    relax = np.where(was, 0.5, 1.0)  # a device forecasting already keeps it at half the thresholds
    # the least-squares fit needs no order: every judged device; the rest only where it grows (few)
    slope, tstat, resid, fit_now = _least_squares(state.t[judged], state.y[judged])
    grows = np.flatnonzero((slope >= relax * params.min_growth_per_s) & (tstat >= relax * params.t_min))
    alarm = np.zeros(judged.size, dtype=bool)
    level = np.zeros(judged.size)
    left = np.zeros(judged.size)
    if grows.size:
        t, y = _in_order(state.t[judged[grows]], state.y[judged[grows]])
        slopes = _group_slopes(t, y, params.groups)
        # the t statistic assumed independent samples: a slow wander (lag-1 autocorrelation rho > 0) has
        # fewer, n (1 - rho) / (1 + rho); and a leak makes new highs: the latest group's upper envelope
        # above the highest sample that left the window (an aliased sawtooth, a wander revisit their peak)
        rho = np.clip(_lag1(y), 0.0, 0.99)
        t_eff = tstat[grows] * np.sqrt((1.0 - rho) / (1.0 + rho))
        recent = _quantile(np.where(np.arange(t.shape[1])[None, :] >= (np.isfinite(y).sum(axis=1)
                                                                      * (params.groups - 1) // params.groups)[:, None],
                                    y, np.nan), params.envelope_q)
        spread = np.sqrt(np.nanmean(resid[grows] ** 2, axis=1))
        higher = recent > state.before[judged[grows]] + params.high_margin * spread  # past the fit's scatter
        level[grows] = fit_now[grows] + _quantile(resid[grows], params.envelope_q)
        g = slope[grows]
        left[grows] = np.where(level[grows] >= params.capacity_pct, 0.0,
                               (params.capacity_pct - level[grows]) / np.where(g > 0, g, np.inf))
        r, w = relax[grows], was[grows]
        low, high = slopes.min(axis=1), slopes.max(axis=1)
        steady = low >= params.steady_share * high  # to open: no group far steeper than another (a step, a ramp)
        alarm[grows] = (low >= r * params.min_growth_per_s) & (t_eff >= r * params.t_min) & (w | (steady & higher)) \
            & (left[grows] <= params.horizon_s / r)
    state.active[judged] = alarm
    pick = np.flatnonzero(alarm)
    return state, Forecast(judged[pick].astype(np.int64), level[pick], slope[pick], left[pick])


def growth(state: State, rows: IntArray) -> FloatArray:
    """The least-squares growth per unit of time of these series over their windows (0 where too few
    samples): whether a level the caller judges grows at all."""
    if not rows.size:
        return np.zeros(0)
    slope, _, _, _ = _least_squares(state.t[rows], state.y[rows])
    out: FloatArray = np.nan_to_num(slope)
    return out


def _in_order(t: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Each row's samples in time order, empty slots (NaN) last."""
    order = np.argsort(np.where(np.isfinite(t), t, np.inf), axis=1, kind="stable")
    return np.take_along_axis(t, order, axis=1), np.take_along_axis(y, order, axis=1)


def _least_squares(t: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per row: the slope, its t statistic, the residuals (NaN where empty) and the fit at the row's last time."""
    ok = np.isfinite(t) & np.isfinite(y)
    m = ok.sum(axis=1).astype(np.float64)
    tz, yz = np.where(ok, t, 0.0), np.where(ok, y, 0.0)
    tm, ym = tz.sum(axis=1) / m, yz.sum(axis=1) / m
    dt = np.where(ok, t - tm[:, None], 0.0)
    sxx = (dt * dt).sum(axis=1)
    slope = np.where(sxx > 0, (dt * (yz - ym[:, None])).sum(axis=1) / np.where(sxx > 0, sxx, 1.0), 0.0)
    r0 = np.where(ok, yz - ym[:, None] - slope[:, None] * dt, 0.0)
    s2 = (r0 * r0).sum(axis=1) / np.maximum(m - 2, 1)
    resid = np.where(ok, r0, np.nan)
    se = np.sqrt(s2 / np.where(sxx > 0, sxx, np.inf))
    tstat = np.where(se > 0, slope / np.where(se > 0, se, 1.0), np.where(slope > 0, np.inf, 0.0))
    last = np.where(ok, t, -np.inf).max(axis=1)
    return slope, tstat, resid, ym + slope * (last - tm)


def _lag1(y: FloatArray) -> FloatArray:
    """Per row (time-ordered, empty last): the lag-1 autocorrelation of its values less their linear trend
    (the trend of consecutive differences removed as their mean)."""
    ok = np.isfinite(y)
    d = np.where(ok[:, 1:] & ok[:, :-1], np.diff(np.where(ok, y, 0.0), axis=1), np.nan)
    n = np.isfinite(d).sum(axis=1)
    idx = np.arange(y.shape[1])[None, :]
    mean_d = np.where(n > 0, np.nansum(d, axis=1) / np.maximum(n, 1), 0.0)
    first = np.where(ok[:, :1], y[:, :1], 0.0)
    detr = np.where(ok, y - first - mean_d[:, None] * idx, np.nan)
    c = detr - np.nanmean(detr, axis=1, keepdims=True)
    num = np.nansum(c[:, 1:] * c[:, :-1], axis=1)
    den = np.nansum(c * c, axis=1)
    out: FloatArray = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return out


def _group_slopes(t: FloatArray, y: FloatArray, groups: int) -> FloatArray:
    """Per row (time-ordered, empty last): the slopes between the medians of consecutive ones of its `groups`
    equal groups of samples, (rows, groups - 1). Resistant to spikes; all grow only on a steady creep: a step
    raises at most the two around the group it falls in, a ramp that flattens not the last."""
    m = np.isfinite(y).sum(axis=1)[:, None]
    cols = np.arange(t.shape[1])[None, :]
    meds = []
    for k in range(groups):
        sel = (cols >= k * m // groups) & (cols < (k + 1) * m // groups)
        meds.append((_median(np.where(sel, t, np.nan)), _median(np.where(sel, y, np.nan))))
    out = np.zeros((t.shape[0], groups - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(groups - 1):
            (t1, y1), (t2, y2) = meds[k], meds[k + 1]
            out[:, k] = np.where(t2 > t1, (y2 - y1) / (t2 - t1), 0.0)
    out_: FloatArray = np.nan_to_num(out)
    return out_


def _median(rows: FloatArray) -> FloatArray:
    return _quantile(rows, 0.5)


def _quantile(rows: FloatArray, q: float) -> FloatArray:
    """Per row, the `q` quantile of its values (NaN ignored; lower of the two neighbours; a row of none: 0)."""
    ordered = np.sort(rows, axis=1)
    counted = np.isfinite(rows).sum(axis=1)
    at = np.clip(np.floor(q * (counted - 1)).astype(np.int64), 0, rows.shape[1] - 1)
    out: FloatArray = np.take_along_axis(ordered, at[:, None], axis=1)[:, 0]
    return np.where(counted > 0, out, 0.0)
