"""The device feed: R1 (T1, T2, T3, T6, T7 bounds and the clock's down-clocking; lower bounds only where the
job or device is meant to be busy; T6 only on memory that rose into its band during the run) and R2 (CUSUM on
T1, T2, T6) per device, on one tick of a job's device samples; R2 on the device's deviation from the job's
median device at the same tick (common mode such as the thermal warm-up of a starting job is not a device
drift); the OOM forecast on T6's trend (`rules/oom_forecast.py`). Samples are regrouped per tick first
(`device_ticks`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from schemas.columns import DEVICE_METRICS
from streams.detect.combine.chunks import DeviceChunk, column
from streams.detect.rules import oom_forecast as oom
from streams.detect.rules import r01_static_bounds as r1
from streams.detect.rules import r02_cusum as r2
from streams.detect.rules.base import Alarms, BoolArray, FloatArray, IntArray
from streams.detect.scopes.finding import Finding
from streams.detect.signals.shared import SignalState, grow, rule_finding, timed
from streams.detect.windows.step_frames import NameTable

R2_DEVICE = ("power_w", "temp_c", "mem_pct")  # the metrics R2 runs on (DeviceParams.r2_params)
METRIC_IDS = {"power_w": "T1", "temp_c": "T2", "aicore_pct": "T3", "aicpu_pct": "T4", "ctrlcpu_pct": "T5",
              "mem_pct": "T6", "membw_pct": "T7", "freq_mhz": "clock"}


@dataclass(frozen=True, slots=True)
class DeviceParams:
    """The settings the device feed reads (infra/settings.py `DetectionConfig.params` fills them, by the
    settings' names); `r1_bounds` and `r2_params` give them per device metric."""

    resolve_after_steps: int
    r1_k: int
    r1_temp_max_c: float
    r1_mem_max_pct: float
    r1_power_max_w: float
    r1_aicore_min_pct: float
    r1_membw_min_pct: float
    r1_busy_min_pct: float
    r1_job_busy_min_pct: float
    r1_downclock_pct: float
    r2_k: float
    r2_h: float
    r2_history: int
    r2_warmup: int
    r2_warmup_power_w: int
    r2_warmup_mem_pct: int
    r2_confirm: int
    r2_confirm_window: int
    r2_sigma_min_temp_c: float
    r2_sigma_min_power_w: float
    r2_sigma_min_mem_pct: float
    r2_transition: float
    r1_mem_baseline_samples: int
    oom_horizon_steps: float
    oom_min_growth_pct_per_step: float
    oom_window: int
    oom_t_min: float

    def oom_params(self, step_s: float) -> oom.Params:
        """The forecast's parameters in seconds of the samples' clock, from its settings in steps and the job's
        recent step time (unknown, 0: no growth is fast enough, nothing is forecast); its warm-up is memory's
        for R2 (the job's own warm-up steps)."""
        per_s = self.oom_min_growth_pct_per_step / step_s if step_s > 0 else np.inf
        return oom.Params(horizon_s=self.oom_horizon_steps * max(step_s, 0.0), min_growth_per_s=float(per_s),
                          window=self.oom_window, t_min=self.oom_t_min,
                          warmup=self.r2_warmup_mem_pct)

    def r1_bounds(self) -> tuple[tuple[str, float, bool, str | None], ...]:
        """R1's configured bound per device metric (0 = off): (metric, bound, lower?, where a lower bound
        applies: "job" while the job is busy, "device" while the device itself is busy)."""
        return (("temp_c", self.r1_temp_max_c, False, None), ("mem_pct", self.r1_mem_max_pct, False, None),
                ("power_w", self.r1_power_max_w, False, None), ("aicore_pct", self.r1_aicore_min_pct, True, "job"),
                ("membw_pct", self.r1_membw_min_pct, True, "device"))

    def r2_params(self) -> dict[str, r2.Params]:
        """R2's parameters per metric of `R2_DEVICE`: power and memory follow the load at once and have
        their own warm-up, the temperature lags it (thermal lag) and takes `r2_warmup`; each metric has
        its own absolute sigma floor."""
        warmup = {"power_w": self.r2_warmup_power_w, "temp_c": self.r2_warmup, "mem_pct": self.r2_warmup_mem_pct}
        sigma_min = {"power_w": self.r2_sigma_min_power_w, "temp_c": self.r2_sigma_min_temp_c,
                     "mem_pct": self.r2_sigma_min_mem_pct}
        return {metric: r2.Params(k=self.r2_k, h=self.r2_h, history=self.r2_history, warmup=int(warmup[metric]),
                                  sigma_min=float(sigma_min[metric]))
                for metric in R2_DEVICE}


TICK_NS = 1_000_000_000  # device samples are bucketed per second of their own timestamps
HOLD_TICKS = 2           # a tick is evaluated once samples this many ticks newer arrived ...
WAIT_TICKS = 30          # ... and every device reporting lately is in it, or at the latest this many ticks on


def device_ticks(chunk: DeviceChunk, state: SignalState, flush: bool = False) -> list[DeviceChunk]:
    """Device samples regrouped per tick, released once the tick is whole.

    R2 removes the common mode (the job's median device at the same tick): evaluated on part
    of a tick, a job-wide load change (an evaluation or checkpoint step) leaves a spurious
    drift on the devices of that part. A tick arrives split in two ways: a decode batch ends
    in the middle of it, and the device topic's partitions (keyed per device) run apart under
    a backlog, each carrying its share of the devices seconds ahead of or behind the others
    (the Kafka-only R2 false alarms of `slow_pp_stage`, `replay --device-skew`). So a tick
    waits until samples `HOLD_TICKS` newer arrived AND every device that reported within the
    last `WAIT_TICKS` ticks has reported this tick or a later one (its partition got past it;
    a device sampled less often than every tick does not hold it); a device gone silent (a
    dead host) holds the job's ticks `WAIT_TICKS` at most. A sample of a tick already evaluated
    is late: it is left out of the rules (alone it would be a partial tick), counted in
    `late_samples`, and its device is waited for from then on. Before, a device whose first
    samples came late was never registered, so every later sample of it came late too: R1/R2
    never saw a device of a lagging partition (`replay --device-skew 4`: cooling_loss lost R1
    and R2 on the rank whose device was in it).
    """
    columns = cast(dict[str, Any], chunk)  # its columns are read by run-time names (metrics)
    if not _regroup_arrays(columns, state):
        _regroup_each({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in columns.items()}, state)
    newest = max(state.ticks, default=max(state.released_tick, 0))
    if not flush and min(state.ticks, default=newest) > newest - HOLD_TICKS:
        # no tick can be released (the loop below would stop at the first): skip its two passes over every
        # device, which a job's many device chunks per tick paid each time; the purge waits for a chunk that
        # can release a tick and then drops the same devices (a device's newest tick only grows)
        return []
    for d in [d for d, t in state.device_tick.items() if t <= newest - WAIT_TICKS]:
        del state.device_tick[d]  # silent for WAIT_TICKS: no longer waited for
    frontier = min(state.device_tick.values(), default=newest)  # every device reporting lately got this far
    ready: list[int] = []
    for t in sorted(state.ticks):
        whole = t <= newest - HOLD_TICKS and t <= frontier
        if not (flush or whole or t <= newest - WAIT_TICKS):
            break  # ticks are evaluated in order: a later whole tick waits for an earlier incomplete one
        ready.append(t)
    if ready:
        state.released_tick = max(state.released_tick, ready[-1])
    out: list[DeviceChunk] = []
    for t in ready:
        out.append(cast(DeviceChunk, {"kind": "device", "job": chunk.get("job", ""), **_joined(state.ticks.pop(t))}))
    return out


# A tick's samples are kept as the pieces they came in (`PIECES` marks such a tick): a numpy array per numeric
# column and chunk, joined when the tick is released. A tick of a snapshot written before holds one flat list per
# column (no mark): samples added to it are appended as values, and it is released as it is.
PIECES = "_pieces"
_INTS = ("device", "rank", "ts_ns")


def _joined(tick: dict[str, list[Any]]) -> dict[str, Any]:
    """A released tick's columns: each column's pieces as one array (a list where a piece is a list)."""
    if tick.pop(PIECES, None) is None:
        return tick
    out: dict[str, Any] = {}
    for name, pieces in tick.items():
        if all(isinstance(p, np.ndarray) for p in pieces):
            out[name] = np.concatenate(pieces) if len(pieces) != 1 else pieces[0]
        else:
            out[name] = [v for p in pieces for v in (p.tolist() if isinstance(p, np.ndarray) else p)]
    return out


def _add_piece(state: SignalState, t: int, piece: dict[str, Any]) -> None:
    """`piece` (a column -> its values of tick `t`) into the tick."""
    tick = state.ticks.get(t)
    if tick is None:
        tick = state.ticks[t] = {PIECES: []}
    if PIECES in tick:
        for name, values in piece.items():
            tick.setdefault(name, []).append(values)
    else:  # a tick restored from a snapshot of flat lists
        for name, values in piece.items():
            tick.setdefault(name, []).extend(values.tolist() if isinstance(values, np.ndarray) else values)


def _numbers(values: Any, ints: bool) -> npt.NDArray[Any] | None:
    """A numeric column as a 1-d int64 (`ints`) or float64 array (a measurement: None is NaN), or None: it holds
    something else (a float in an int column, text, a nested list)."""
    try:
        raw = np.asarray(values)
        if raw.ndim != 1:
            return None
        if raw.dtype.kind == "u" and raw.size and int(raw.max()) > np.iinfo(np.int64).max:
            return None
        if raw.dtype.kind in "iu" or (raw.dtype.kind == "f" and not ints):
            return raw.astype(np.int64 if ints else np.float64, copy=False)
        if raw.size == 0:
            return np.empty(0, dtype=np.int64 if ints else np.float64)
        if raw.dtype.kind == "O" and not ints and all(v is None or type(v) in (int, float) for v in values):
            return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        pass
    return None


def _device_keys(hosts: list[str], devices: Any) -> list[str]:
    """Each sample's device as the job's device state names it ("host/device")."""
    numbers = devices.tolist() if isinstance(devices, np.ndarray) else devices
    return [f"{h}/{d}" for h, d in zip(hosts, numbers, strict=True)]


def _regroup_arrays(chunk: dict[str, Any], state: SignalState) -> bool:
    """The chunk's samples into their ticks, a piece per tick: numpy arrays for the numeric columns (a binary
    frame's as they came, a JSON chunk's converted), a list for the text ones; False, nothing changed, for a
    chunk whose columns are not all as long as its timestamps or do not convert (`_regroup_each` takes it)."""
    stamps = chunk.get("ts_ns")
    hosts, devices = chunk.get("host"), chunk.get("device")
    if stamps is None or not isinstance(hosts, list) or devices is None:
        return False
    n = len(stamps)
    cols: dict[str, Any] = {}
    for name, values in chunk.items():
        if isinstance(values, np.ndarray) or (isinstance(values, list) and name != "host"):
            array = _numbers(values, name in _INTS)
            if array is None or array.size != n:
                return False
            cols[name] = array
    if len(hosts) != n or "device" not in cols or "ts_ns" not in cols:
        return False
    ticks = cols["ts_ns"] // TICK_NS
    seen = state.device_tick
    keys = _device_keys(hosts, cols["device"])
    lo, hi = (int(ticks.min()), int(ticks.max())) if n else (0, -1)
    if lo == hi and lo >= max(0, max(seen.values(), default=0)):
        # the usual chunk: one tick, no device newer: every device's newest tick becomes it, as the loop below
        # would set it, without a Python step per sample (10,240 a tick at 10,240 ranks)
        seen.update(zip(keys, repeat(lo)))
    else:
        for name, t in zip(keys, ticks.tolist(), strict=True):
            if seen.get(name, -1) < t:
                seen[name] = t
    fresh = ticks > state.released_tick
    state.late_samples += n - int(np.count_nonzero(fresh))
    if not n or not fresh.any():
        return True
    if lo == hi:
        _add_piece(state, lo, {"host": list(hosts), **cols})
        return True
    for t in np.unique(ticks[fresh]).tolist():
        rows = np.flatnonzero(ticks == t)
        _add_piece(state, t, {"host": [hosts[i] for i in rows.tolist()], **{k: v[rows] for k, v in cols.items()}})
    return True


def _regroup_each(chunk: dict[str, Any], state: SignalState) -> None:
    """The chunk's samples into their ticks one by one, a piece of lists per tick (any chunk; `_regroup_arrays`
    does the same a column at a time)."""
    cols = [k for k, v in chunk.items() if isinstance(v, list)]
    hosts, devices = chunk.get("host", []), chunk.get("device", [])
    pieces: dict[int, dict[str, list[Any]]] = {}
    for i, ts in enumerate(chunk["ts_ns"]):
        t = int(ts) // TICK_NS
        # a device is waited for from its first sample on, a late one too: its partition is
        # behind, and its next ticks must wait for it (else every sample of it came late)
        name = f"{hosts[i]}/{devices[i]}" if i < len(hosts) and i < len(devices) else str(i)
        if state.device_tick.get(name, -1) < t:
            state.device_tick[name] = t
        if t <= state.released_tick:
            state.late_samples += 1
            continue
        piece = pieces.setdefault(t, {k: [] for k in cols})
        for k in cols:
            piece[k].append(chunk[k][i])
    for t, piece in pieces.items():
        _add_piece(state, t, piece)


def device_findings(chunk: DeviceChunk, state: SignalState, params: DeviceParams,
                    timings: dict[str, float], stage_of: IntArray | None = None,
                    clock: tuple[int, int, float] | None = None) -> list[Finding]:
    """R1/R2 and the OOM forecast on one tick of a job's device samples. `stage_of`: the PP stage of each
    rank (the engine's topology, -1 or absent = unknown): R2's common mode is the device's stage. `clock`:
    the job's newest step, when it ended (ns, its own clock) and its recent step time in seconds (the forecast
    is told in steps, from the step of the samples' time; None: the
    samples still fill its window, nothing is forecast)."""
    t0 = time.perf_counter()
    hosts: list[str] = chunk["host"]
    devices = chunk["device"]
    ranks = chunk["rank"]
    keys = _device_keys(hosts, devices)
    series = state.devices
    idx = np.fromiter(map(series.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
    if (idx < 0).any():  # new devices, numbered in order of first appearance
        for key in dict.fromkeys(key for key, i in zip(keys, idx.tolist(), strict=True) if i < 0):
            series[key] = len(series)
        idx = np.fromiter(map(series.__getitem__, keys), dtype=np.int64, count=len(keys))
    rank_of = np.asarray(ranks, dtype=np.int64)
    known = rank_of >= 0
    state.device_rank.update(zip(idx[known].tolist(), rank_of[known].tolist(), strict=True))  # the last one wins
    host_of = NameTable().codes(hosts)  # each host's index among the chunk's hosts
    n = len(series)
    names = list(series)
    values = {m: np.asarray(column(chunk, m), dtype=np.float64) for m in DEVICE_METRICS}
    # rounds: a device sampled several times in one chunk is evaluated in order (round r: each device's
    # r-th sample by time, the samples of a round in time order)
    order = np.argsort(np.asarray(chunk["ts_ns"], dtype=np.int64), kind="stable")
    rounds = _rounds(idx[order], order)
    r2_params = params.r2_params()
    stamps_s = np.asarray(chunk["ts_ns"], dtype=np.int64) / 1e9
    step_s = clock[2] if clock is not None else 0.0
    oom_params = params.oom_params(step_s)
    out: list[Finding] = []
    for sel in rounds:
        aicore = np.full(n, np.nan)
        aicore[idx[sel]] = values["aicore_pct"][sel]
        active = _busy(aicore, params)
        for metric, bound, lower, gate in _r1_bounds(values["freq_mhz"][sel], state, params):
            x = np.full(n, np.nan)
            x[idx[sel]] = values[metric][sel]
            if metric == "mem_pct":
                x = _risen(x, state, params, bound)
            r1_params = r1.Params(lower=bound if lower else np.nan, upper=np.nan if lower else bound, k=params.r1_k)
            key = f"r1:{metric}"
            st, alarms = r1.evaluate(x, grow(state.rules.get(key), n, "run"), r1_params,
                                     active=active.get(gate, True))
            state.rules[key] = st
            out.extend(_device_finding("R1", metric, alarms, names, state, params.resolve_after_steps))
        peers = _peer_classes(sel, rank_of, host_of, stage_of)
        for metric in R2_DEVICE:
            if _in_transition(values[metric][sel], state, metric, params.r2_transition):
                continue
            x = np.full(n, np.nan)
            x[idx[sel]] = _minus_common_mode(values[metric][sel], peers)
            key = f"r2:{metric}"
            st2, alarms = r2.evaluate(x, grow(state.rules.get(key), n, "n"), r2_params[metric])
            state.rules[key] = st2
            out.extend(_device_finding("R2", metric, _confirmed(alarms, x, state, key, params), names, state,
                                       params.resolve_after_steps))
        mem, ts = np.full(n, np.nan), np.full(n, np.nan)
        mem[idx[sel]] = values["mem_pct"][sel]
        ts[idx[sel]] = stamps_s[sel]
        st_oom, forecast = oom.evaluate(ts, mem, grow(state.rules.get("oom"), n, "pos"), oom_params)
        state.rules["oom"] = st_oom
        if len(forecast) and clock is not None and step_s > 0:
            newest, ended_ns, _ = clock
            # the step of these samples' time: device samples run ahead of or behind the steps (their own topic)
            at = newest + round((float(np.nanmax(ts)) - ended_ns / 1e9) / step_s) if ended_ns > 0 else newest
            out.extend(_oom_findings(forecast, names, state, (max(at, 0), step_s), params))
    timed(timings, "R1/R2", t0)
    return out


@dataclass(slots=True)
class _MemBase:
    count: IntArray   # samples seen per device
    first: FloatArray  # (n, r1_mem_baseline_samples) its samples after R2's memory warm-up
    base: FloatArray  # their median once all are in (NaN before)


def _risen(x: FloatArray, state: SignalState, params: DeviceParams, bound: float) -> FloatArray:
    """T6 for R1's bound where the device's memory rose into the band during the run, 0 (inside) elsewhere.

    A job that keeps HBM near full by design (a caching allocator, large micro-batches) sits at 95-97 % from
    its first steps: that is its level, not a risk (issue #44; a leak is the forecast's, `oom_forecast`).
    Memory that climbs over the bound from a level under it (spec §4: memory mismanagement, a bad batch size)
    is news. A device's level is the median of its `r1_mem_baseline_samples` samples after R2's memory
    warm-up (`r2_warmup_mem_pct`, the job's own warm-up); before it is known the bound judges nothing."""
    size, warm = params.r1_mem_baseline_samples, params.r2_warmup_mem_pct
    st = grow(state.rules.get("r1:mem_base"), x.size, "count")
    if st is None or st.first.shape[1] != size:
        st = _MemBase(np.zeros(x.size, dtype=np.int64), np.full((x.size, max(size, 1)), np.nan),
                      np.full(x.size, np.nan))
        state.rules["r1:mem_base"] = st
    rows = np.flatnonzero(np.isfinite(x))
    k = st.count[rows] - warm
    filling = rows[(k >= 0) & (k < size)]
    st.first[filling, (st.count[filling] - warm)] = x[filling]
    st.count[rows] += 1
    done = filling[st.count[filling] - warm == size]
    if done.size:
        st.base[done] = np.median(st.first[done], axis=1)
    risen = np.isfinite(st.base) & (st.base < bound)
    out: FloatArray = np.where(risen, x, np.where(np.isfinite(x), 0.0, np.nan))
    return out


def _oom_findings(fc: oom.Forecast, names: list[str], state: SignalState, clock: tuple[int, float],
                  params: DeviceParams) -> list[Finding]:
    """One finding per device forecast to run out of memory, told in the job's steps (`clock`: the step of the
    samples' time and the step time in seconds)."""
    step, step_s = clock
    a = Alarms(index=fc.index, value=fc.level, baseline=np.full(len(fc), np.nan), threshold=np.full(len(fc), 100.0))
    out = []
    for i, j in enumerate(fc.index.tolist()):
        host, dev = names[j].rsplit("/", 1)
        rank = state.device_rank.get(j)
        left_s = float(fc.seconds_left[i])
        steps_left = int(np.ceil(left_s / step_s))
        growth = float(fc.growth_per_s[i]) * step_s
        when = f"~{left_s / 60:.0f} min" if left_s >= 90 else f"~{left_s:.0f} s"
        who = f"rank {rank} ({host} dev {dev})" if rank is not None else f"{host} device {dev}"
        out.append(rule_finding(
            "OOM", f"device:{names[j]}", "device", 0,
            f"{who} will run out of device memory at ~step {step + steps_left:,} (in {steps_left:,} steps, "
            f"{when}): {fc.level[i]:.0f} % now, +{growth:.2f} %/step", a, i, params.resolve_after_steps,
            metric="T6", host=host, device=int(dev), ranks=[rank] if rank is not None else [], unit="%",
            evidence={"oom_step": float(step + steps_left), "steps_left": float(steps_left), "seconds_left": left_s,
                      "growth_pct_per_step": growth}, open_after=2, severity="warning"))
    return out


PEER_HOSTS = 3  # a stage's devices are a device's peers for R2 when they span this many hosts


def _rounds(series: IntArray, order: IntArray) -> list[IntArray]:
    """`order` (sample positions in time order, `series` their devices) split into rounds: round r holds
    each device's r-th sample, in time order."""
    if not order.size:
        return []
    by_series = np.argsort(series, kind="stable")  # each device's samples together, still in time order
    grouped = series[by_series]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    nth = np.empty(order.size, dtype=np.int64)
    nth[by_series] = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    return [order[nth == r] for r in range(int(nth.max()) + 1)]


def _peer_classes(sel: IntArray, ranks: IntArray, host_of: IntArray, stage_of: IntArray | None) -> IntArray:
    """Per sample of the round, its peer class for R2's common mode: its PP stage when the stage's
    devices in this tick span `PEER_HOSTS` hosts or more, else -1 (the whole job)."""
    rank = ranks[sel]
    cls = np.full(sel.size, -1, dtype=np.int64)
    if stage_of is None or not stage_of.size:
        return cls
    known = (rank >= 0) & (rank < stage_of.size)
    cls[known] = stage_of[rank[known]]
    host_ids = host_of[sel]
    for k in np.unique(cls[cls >= 0]).tolist():
        members = cls == k
        if np.unique(host_ids[members]).size < PEER_HOSTS:
            cls[members] = -1
    return cls


TRANSITION_HOLD_TICKS = 2  # ticks after a job-wide change still left out (hosts straggling back at their phase)


def _in_transition(x: FloatArray, state: SignalState, metric: str, share: float) -> bool:
    """Whether this tick, or the one before, saw the job's median `metric` move by `share` or more.

    Each host's agent samples at its own phase, on its own clock (milliseconds apart at best), so
    the samples of one tick span up to a tick interval. When the whole job's load changes inside
    that window (a checkpoint, an evaluation pass, every rank waiting for one stalled rank), a
    tick holds devices sampled before and after the change: their differences are the change
    itself, not drift, and removing the common mode leaves half the fleet "drifted". Such a tick
    and the TRANSITION_HOLD_TICKS after it (the change may straddle them) are left out of R2.
    """
    ok = x[np.isfinite(x)]
    if share <= 0 or not ok.size:
        return False
    med = float(np.median(ok))
    prev = state.rules.get(f"r2med:{metric}")
    state.rules[f"r2med:{metric}"] = med
    held = int(state.rules.pop(f"r2gate:{metric}", 0))
    if isinstance(prev, float) and abs(med - prev) >= share * max(abs(prev), abs(med), 1e-9):
        state.rules[f"r2gate:{metric}"] = TRANSITION_HOLD_TICKS
        return True
    if held > 1:
        state.rules[f"r2gate:{metric}"] = held - 1
    return held > 0


R2_MIN_DEVICES = 8  # devices in a tick for R2's common mode to be stable (a host's worth)


def _minus_common_mode(x: FloatArray, peers: IntArray) -> FloatArray:
    """Each sample's deviation from the median of its peers at the same tick (>= 3 of them; else
    the job's median). A job-wide ramp (warm-up, a load change, room temperature) is common mode,
    a failing device is not; so is a PP stage's load shift (a slow stage: its devices draw more
    power while the other stage's wait; with two stages the job's median sits between the two and
    every device looked drifted). Natural stage imbalance (the LM head stage) leaves the comparison.
    A tick with fewer than `R2_MIN_DEVICES` devices gives no verdict (NaN): the median of a handful
    moves with each device's own share of the work (variable sequence lengths, a checkpoint), and a
    job of one or two devices has none to remove at all (healthy simulated jobs: 39 R2 incidents in
    12 runs of 2 ranks, 13 in 12 runs of 4; none at 8). R1's bounds still judge absolute values."""
    ok = np.isfinite(x)
    if ok.sum() < R2_MIN_DEVICES:
        return np.full(x.shape, np.nan)
    out = x - float(np.median(x[ok]))
    for k in np.unique(peers[peers >= 0]).tolist():
        members = (peers == k) & ok
        if members.sum() >= 3:
            out[members] = x[members] - float(np.median(x[members]))
    return out


def _busy(aicore: FloatArray, params: DeviceParams) -> dict[str | None, BoolArray | bool]:
    """Where R1's lower bounds apply at this tick (a utilisation under its bound is only news on a
    device meant to be busy). "job": the job's median AI Core is at least `r1_job_busy_min_pct`
    (a checkpoint or an evaluation pause idles every device at once, 3 ticks at ~25 % in the
    simulator: the job's schedule, not a starved device). "device": the device's own AI Core is
    at least `r1_busy_min_pct` (memory bandwidth and clock follow the load: a device waiting for a
    straggler, or idle, is neither memory-starved nor throttled; an idle GPU lowers its clock)."""
    ok = aicore[np.isfinite(aicore)]
    job = bool(ok.size) and float(np.median(ok)) >= params.r1_job_busy_min_pct
    device = np.isfinite(aicore) & (np.nan_to_num(aicore) >= params.r1_busy_min_pct)
    return {"job": job, "device": device}


def _r1_bounds(freq: FloatArray, state: SignalState,
               params: DeviceParams) -> list[tuple[str, float, bool, str | None]]:
    """(metric, bound, lower?, gate) of R1 on device samples: the configured T1–T7 bounds, and the
    clock's down-clocking bound (spec §3: > 5 %) under the highest clock the job's devices reported
    (their rated clock: the devices of one job are of one kind, so a chip down-clocked from its
    first sample on still sits under its peers')."""
    out = [(metric, float(bound), lower, gate) for metric, bound, lower, gate in params.r1_bounds()
           if float(bound) > 0]
    ok = freq[np.isfinite(freq) & (freq > 0)]
    ref = max(float(state.rules.get("r1:freq_ref", 0.0)), float(ok.max()) if ok.size else 0.0)
    if ref > 0:
        state.rules["r1:freq_ref"] = ref
        if params.r1_downclock_pct > 0:
            out.append(("freq_mhz", ref * (1.0 - params.r1_downclock_pct / 100.0), True, "device"))
    return out


def _confirmed(a: Alarms, x: FloatArray, state: SignalState, key: str, params: DeviceParams) -> Alarms:
    """R2 alarms of devices that alarmed `r2_confirm` times within their last `r2_confirm_window` samples.

    CUSUM resets after an alarm; a real drift alarms again within a few samples, one odd sample
    (an evaluation or checkpoint step's load dip) does not. Per series the spec's h gives an
    in-control run length of a few hundred samples; over a fleet of devices that is an alarm a
    minute, so a device needs repeated alarms before it counts (k-of-n confirmation).
    """
    if params.r2_confirm <= 1:
        return a
    hist = grow(state.rules.get(f"{key}:hits"), x.size, "bits")
    if hist is None:
        hist = _Hits(bits=np.zeros(x.size, dtype=np.int64))
        state.rules[f"{key}:hits"] = hist
    window_mask = (1 << params.r2_confirm_window) - 1
    sampled = np.isfinite(x)
    hist.bits = np.where(sampled, (hist.bits << 1) & window_mask, hist.bits)
    hist.bits[a.index] |= 1
    counts = np.array([bin(int(b)).count("1") for b in hist.bits[a.index]], dtype=np.int64)
    keep = counts >= params.r2_confirm
    return Alarms(index=a.index[keep], value=a.value[keep], baseline=a.baseline[keep], threshold=a.threshold[keep])


@dataclass(slots=True)
class _Hits:
    bits: IntArray


def _device_finding(rule: str, metric: str, a: Alarms, names: list[str], state: SignalState,
                    resolve_after: int) -> list[Finding]:
    out = []
    for i, j in enumerate(a.index.tolist()):
        host, dev = names[j].rsplit("/", 1)
        rank = state.device_rank.get(j)
        out.append(rule_finding(
            rule, f"device:{names[j]}", "device", 0,
            f"{METRIC_IDS[metric]} {metric} of {host} device {dev} at {a.value[i]:.1f} "
            f"({'beyond bound' if rule == 'R1' else 'CUSUM drift from'} {a.threshold[i]:.1f})",
            a, i, resolve_after, metric=METRIC_IDS[metric], host=host, device=int(dev),
            ranks=[rank] if rank is not None else [],
            open_after=1, severity="critical" if rule == "R1" else "warning"))
    return out
