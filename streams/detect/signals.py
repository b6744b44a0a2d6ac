"""Rules R1–R10 fed from released frames and device samples; their state per job.

The glue between the engine's frames and the pure rule modules in streams/detect/rules/: it picks
the series each rule reads (spec §2's "data" column), keeps one state per series and turns
alarms into Findings on the right scope. Keys decide merging: a rule firing on "job" joins
the slow-step incident, on "rank:r" the rank's incident, on "host:h" the host's.

- device samples: R1 (T1, T2, T3, T6, T7 bounds and the clock's down-clocking; lower bounds only
  where the job or device is meant to be busy) and R2 (CUSUM on T1, T2, T6) per device,
  R2 on the device's deviation from the job's median device at the same tick (common mode
  such as the thermal warm-up of a starting job is not a device drift);
- steps: R1 on T8 (GC pause per rank), R3 on job step throughput and D1, R10 per rank;
- kernel summaries: R4 (per kernel key: job trend + rank cross-section), R5/R6 per collective
  key and group (SLOW_LINK / SLOW_GROUP), R7 (job median gap), R8 per rank, R9 per direction.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, cast

import numpy as np

from infra.settings import DetectionConfig
from schemas.columns import DEVICE_METRICS, DOMAINS
from streams.detect.advice import advise, advise_rule
from streams.detect.combine.chunks import DeviceChunk, column
from streams.detect.rules import r01_static_bounds as r1
from streams.detect.rules import r02_cusum as r2
from streams.detect.rules import r03_throughput_window as r3
from streams.detect.rules import r04_kernel_efficiency as r4
from streams.detect.rules import r05_slow_rank_in_group as r5
from streams.detect.rules import r06_slow_group as r6
from streams.detect.rules import r07_minority_kernel_gap as r7
from streams.detect.rules import r08_launch_latency as r8
from streams.detect.rules import r09_copy_rate as r9
from streams.detect.rules import r10_interstep_cpu as r10
from streams.detect.rules.base import Alarms, BoolArray, FloatArray, IntArray
from streams.detect.scopes.finding import Finding
from streams.detect.windows.comm_columns import comm_columns, transfer_ns
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, Topology

# domains whose collectives are point-to-point: a send and its recv are the two ends of one transfer, so R5/R6
# take their transfer rate from both keys together (a stage's recv waits on both neighbours and holds the
# pipeline bubble; the matching send of the stage that waited less shows the transfer)
POINT_TO_POINT = ("pp",)

# R1 bounds per device metric: (metric, config field of the bound, lower?, where a lower bound applies:
# "job" while the job is busy, "device" while the device itself is busy)
R1_DEVICE = (("temp_c", "r1_temp_max_c", False, None), ("mem_pct", "r1_mem_max_pct", False, None),
             ("power_w", "r1_power_max_w", False, None), ("aicore_pct", "r1_aicore_min_pct", True, "job"),
             ("membw_pct", "r1_membw_min_pct", True, "device"))
R2_DEVICE = ("power_w", "temp_c", "mem_pct")
METRIC_IDS = {"power_w": "T1", "temp_c": "T2", "aicore_pct": "T3", "aicpu_pct": "T4", "ctrlcpu_pct": "T5",
              "mem_pct": "T6", "membw_pct": "T7", "freq_mhz": "clock"}


@dataclass(slots=True)
class SignalState:
    rules: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)   # "host/device" -> series index
    device_rank: dict[int, int] = field(default_factory=dict)
    pending: list[tuple[int, Finding]] = field(default_factory=list)  # (sample time ns, device finding)
    ticks: dict[int, dict[str, list[Any]]] = field(default_factory=dict)  # device samples per tick, held
    device_tick: dict[str, int] = field(default_factory=dict)  # "host/device" -> newest tick it reported
    released_tick: int = -1  # ticks up to this one were evaluated: later samples of them are late
    late_samples: int = 0


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
    if not _regroup_columns(columns, state):
        _regroup_each(columns, state)
    newest = max(state.ticks, default=max(state.released_tick, 0))
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
        out.append(cast(DeviceChunk, {"kind": "device", "job": chunk.get("job", ""), **state.ticks.pop(t)}))
    return out


def _regroup_each(chunk: dict[str, Any], state: SignalState) -> None:
    """The chunk's samples into their ticks one by one (any chunk; `_regroup_columns` does the same per column)."""
    cols = [k for k, v in chunk.items() if isinstance(v, list)]
    hosts, devices = chunk.get("host", []), chunk.get("device", [])
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
        tick = state.ticks.setdefault(t, {k: [] for k in cols})
        for k in cols:
            tick.setdefault(k, []).append(chunk[k][i])


def _regroup_columns(chunk: dict[str, Any], state: SignalState) -> bool:
    """`_regroup_each` a column at a time (a list slice per tick and column, not an append per sample
    and column: ~1 µs less per device sample at 4,096 ranks); False, nothing changed, for a chunk
    whose columns are not all as long as its timestamps or whose timestamps are not ints."""
    stamps = chunk["ts_ns"]
    n = len(stamps)
    cols = [k for k, v in chunk.items() if isinstance(v, list)]
    if not all(len(chunk[k]) == n for k in cols) or "host" not in cols or "device" not in cols \
            or not all(type(ts) is int for ts in stamps):
        return False
    ticks = [ts // TICK_NS for ts in stamps]
    seen = state.device_tick
    for name, t in zip([f"{h}/{d}" for h, d in zip(chunk["host"], chunk["device"], strict=True)], ticks, strict=True):
        if seen.get(name, -1) < t:
            seen[name] = t
    released = state.released_tick
    groups: dict[int, list[int]] = {}
    if n and min(ticks) == max(ticks):
        if ticks[0] > released:
            groups[ticks[0]] = list(range(n))
    else:
        for i, t in enumerate(ticks):
            if t > released:
                groups.setdefault(t, []).append(i)
    state.late_samples += n - sum(len(rows) for rows in groups.values())
    for t, rows in groups.items():
        tick = state.ticks.setdefault(t, {k: [] for k in cols})
        pick = itemgetter(*rows) if len(rows) > 1 else None
        for k in cols:
            values = chunk[k]
            if len(rows) == n:
                tick.setdefault(k, []).extend(values)
            elif pick is not None:
                tick.setdefault(k, []).extend(pick(values))
            else:
                tick.setdefault(k, []).append(values[rows[0]])
    return True


def _finding(rule: str, key: str, scope: str, step: int, summary: str, a: Alarms, i: int, cfg: DetectionConfig,
             **kw: Any) -> Finding:
    advice = advise_rule(rule)
    base = float(a.baseline[i])
    return Finding(rule=rule, key=key, scope=scope, step=step, summary=summary[:300],  # type: ignore[arg-type]
                   observed=float(a.value[i]), expected=base if np.isfinite(base) else None,
                   threshold=float(a.threshold[i]) if np.isfinite(a.threshold[i]) else None,
                   cause=advice.cause, suggestion=advice.suggestion, resolve_after=cfg.resolve_after_steps, **kw)


def _timed(timings: dict[str, float], rule: str, start: float) -> None:
    timings[rule] = timings.get(rule, 0.0) + time.perf_counter() - start


def _grow(state: Any, size: int, attr: str) -> Any:
    """A rule state sized for fewer series (the job grew) restarts; equal size keeps it."""
    return state if state is not None and getattr(state, attr).size == size else None


# ---- device samples ---------------------------------------------------------------------
def device_findings(chunk: DeviceChunk, state: SignalState, cfg: DetectionConfig,
                    timings: dict[str, float], stage_of: IntArray | None = None) -> list[Finding]:
    """R1/R2 on one tick of a job's device samples. `stage_of`: the PP stage of each rank (the
    engine's topology, -1 or absent = unknown): R2's common mode is the device's stage."""
    t0 = time.perf_counter()
    hosts: list[str] = chunk["host"]
    devices: list[int] = chunk["device"]
    ranks: list[int] = chunk["rank"]
    idx = np.empty(len(hosts), dtype=np.int64)
    for i, (h, d) in enumerate(zip(hosts, devices, strict=True)):
        key = f"{h}/{d}"
        j = state.devices.get(key)
        if j is None:
            j = state.devices[key] = len(state.devices)
        idx[i] = j
        if ranks[i] >= 0:
            state.device_rank[j] = ranks[i]
    n = len(state.devices)
    names = list(state.devices)
    values = {m: np.asarray(column(chunk, m), dtype=np.float64) for m in DEVICE_METRICS}
    # rounds: a device sampled several times in one chunk is evaluated in order
    order = np.argsort(np.asarray(chunk["ts_ns"], dtype=np.int64), kind="stable")
    seen_count: dict[int, int] = {}
    rounds: list[list[int]] = []
    for pos in order.tolist():
        r = seen_count.get(int(idx[pos]), 0)
        seen_count[int(idx[pos])] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(pos)
    out: list[Finding] = []
    for rows in rounds:
        sel = np.asarray(rows, dtype=np.int64)
        aicore = np.full(n, np.nan)
        aicore[idx[sel]] = values["aicore_pct"][sel]
        active = _busy(aicore, cfg)
        for metric, bound, lower, gate in _r1_bounds(values["freq_mhz"][sel], state, cfg):
            x = np.full(n, np.nan)
            x[idx[sel]] = values[metric][sel]
            params = r1.Params(lower=bound if lower else np.nan, upper=np.nan if lower else bound, k=cfg.r1_k)
            key = f"r1:{metric}"
            st, alarms = r1.evaluate(x, _grow(state.rules.get(key), n, "run"), params,
                                     active=active.get(gate, True))
            state.rules[key] = st
            out.extend(_device_finding("R1", metric, alarms, names, state, cfg))
        peers = _peer_classes(sel, ranks, hosts, stage_of)
        for metric in R2_DEVICE:
            if _in_transition(values[metric][sel], state, metric, cfg.r2_transition):
                continue
            x = np.full(n, np.nan)
            x[idx[sel]] = _minus_common_mode(values[metric][sel], peers)
            key = f"r2:{metric}"
            floor = float(getattr(cfg, f"r2_sigma_min_{metric}", 0.0))
            st2, alarms = r2.evaluate(x, _grow(state.rules.get(key), n, "n"),
                                      r2.Params(k=cfg.r2_k, h=cfg.r2_h, history=cfg.r2_history,
                                                warmup=int(getattr(cfg, f"r2_warmup_{metric}", cfg.r2_warmup)),
                                                sigma_min=floor))
            state.rules[key] = st2
            out.extend(_device_finding("R2", metric, _confirmed(alarms, x, state, key, cfg), names, state, cfg))
    _timed(timings, "R1/R2", t0)
    return out


PEER_HOSTS = 3  # a stage's devices are a device's peers for R2 when they span this many hosts


def _peer_classes(sel: IntArray, ranks: list[int], hosts: list[str], stage_of: IntArray | None) -> IntArray:
    """Per sample of the round, its peer class for R2's common mode: its PP stage when the stage's
    devices in this tick span `PEER_HOSTS` hosts or more, else -1 (the whole job)."""
    rank = np.asarray(ranks, dtype=np.int64)[sel]
    cls = np.full(sel.size, -1, dtype=np.int64)
    if stage_of is None or not stage_of.size:
        return cls
    known = (rank >= 0) & (rank < stage_of.size)
    cls[known] = stage_of[rank[known]]
    host_ids = np.unique(np.asarray(hosts, dtype=object)[sel], return_inverse=True)[1].reshape(-1)
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


def _busy(aicore: FloatArray, cfg: DetectionConfig) -> dict[str | None, BoolArray | bool]:
    """Where R1's lower bounds apply at this tick (a utilisation under its bound is only news on a
    device meant to be busy). "job": the job's median AI Core is at least `r1_job_busy_min_pct`
    (a checkpoint or an evaluation pause idles every device at once, 3 ticks at ~25 % in the
    simulator: the job's schedule, not a starved device). "device": the device's own AI Core is
    at least `r1_busy_min_pct` (memory bandwidth and clock follow the load: a device waiting for a
    straggler, or idle, is neither memory-starved nor throttled; an idle GPU lowers its clock)."""
    ok = aicore[np.isfinite(aicore)]
    job = bool(ok.size) and float(np.median(ok)) >= cfg.r1_job_busy_min_pct
    device = np.isfinite(aicore) & (np.nan_to_num(aicore) >= cfg.r1_busy_min_pct)
    return {"job": job, "device": device}


def _r1_bounds(freq: FloatArray, state: SignalState,
               cfg: DetectionConfig) -> list[tuple[str, float, bool, str | None]]:
    """(metric, bound, lower?, gate) of R1 on device samples: the configured T1–T7 bounds, and the
    clock's down-clocking bound (spec §3: > 5 %) under the highest clock the job's devices reported
    (their rated clock: the devices of one job are of one kind, so a chip down-clocked from its
    first sample on still sits under its peers')."""
    out = [(metric, float(getattr(cfg, name)), lower, gate) for metric, name, lower, gate in R1_DEVICE
           if float(getattr(cfg, name)) > 0]
    ok = freq[np.isfinite(freq) & (freq > 0)]
    ref = max(float(state.rules.get("r1:freq_ref", 0.0)), float(ok.max()) if ok.size else 0.0)
    if ref > 0:
        state.rules["r1:freq_ref"] = ref
        if cfg.r1_downclock_pct > 0:
            out.append(("freq_mhz", ref * (1.0 - cfg.r1_downclock_pct / 100.0), True, "device"))
    return out


def _confirmed(a: Alarms, x: FloatArray, state: SignalState, key: str, cfg: DetectionConfig) -> Alarms:
    """R2 alarms of devices that alarmed `r2_confirm` times within their last `r2_confirm_window` samples.

    CUSUM resets after an alarm; a real drift alarms again within a few samples, one odd sample
    (an evaluation or checkpoint step's load dip) does not. Per series the spec's h gives an
    in-control run length of a few hundred samples; over a fleet of devices that is an alarm a
    minute, so a device needs repeated alarms before it counts (k-of-n confirmation).
    """
    if cfg.r2_confirm <= 1:
        return a
    hist = _grow(state.rules.get(f"{key}:hits"), x.size, "bits")
    if hist is None:
        hist = _Hits(bits=np.zeros(x.size, dtype=np.int64))
        state.rules[f"{key}:hits"] = hist
    window_mask = (1 << cfg.r2_confirm_window) - 1
    sampled = np.isfinite(x)
    hist.bits = np.where(sampled, (hist.bits << 1) & window_mask, hist.bits)
    hist.bits[a.index] |= 1
    counts = np.array([bin(int(b)).count("1") for b in hist.bits[a.index]], dtype=np.int64)
    keep = counts >= cfg.r2_confirm
    return Alarms(index=a.index[keep], value=a.value[keep], baseline=a.baseline[keep], threshold=a.threshold[keep])


@dataclass(slots=True)
class _Hits:
    bits: IntArray


def _device_finding(rule: str, metric: str, a: Alarms, names: list[str], state: SignalState,
                    cfg: DetectionConfig) -> list[Finding]:
    out = []
    for i, j in enumerate(a.index.tolist()):
        host, dev = names[j].rsplit("/", 1)
        rank = state.device_rank.get(j)
        out.append(_finding(
            rule, f"device:{names[j]}", "device", 0,
            f"{METRIC_IDS[metric]} {metric} of {host} device {dev} at {a.value[i]:.1f} "
            f"({'beyond bound' if rule == 'R1' else 'CUSUM drift from'} {a.threshold[i]:.1f})",
            a, i, cfg, metric=METRIC_IDS[metric], host=host, device=int(dev), ranks=[rank] if rank is not None else [],
            open_after=1, severity="critical" if rule == "R1" else "warning"))
    return out


# ---- step frames ------------------------------------------------------------------------
def frame_findings(frame: Frame, topo: Topology, state: SignalState, cfg: DetectionConfig,
                   timings: dict[str, float]) -> list[Finding]:
    if not frame.seen.any():
        return []
    out: list[Finding] = []
    out.extend(_steps(frame, topo, state, cfg, timings))
    if frame.kernels:
        out.extend(_kernels(frame, topo, state, cfg, timings))
    return out


def _rank_findings(rule: str, a: Alarms, topo: Topology, frame: Frame, cfg: DetectionConfig, what: str,
                   metric: str, by_host: bool = True, present: int | None = None) -> list[Finding]:
    """Per-rank alarms; when at least half the world alarms it is one job-scope finding, and when
    at least `slow_host_fraction` of a host's ranks (>= 2) alarm together it is one host-scope
    finding (a host-wide cause such as a CPU hog or a bad PCIe switch is one problem, and it
    joins the host's incident instead of one incident per rank).

    `present`: ranks that had data for this rule in the frame (default: every rank seen). A frame
    released on its timeout under a backlog has the kernel summaries of only some ranks: a job-wide
    R8 on those is still job-wide, not one host finding per host that happened to arrive (the
    per-host R8 incidents beside compile_defect's job incident on the Kafka path)."""
    if len(a) == 0:
        return []
    world = max(int(frame.seen.sum()) if present is None else present, 1)
    if len(a) >= 2 and len(a) >= world / 2:
        i = int(np.argmax(a.value))
        return [_finding(rule, "job", "job", frame.step, f"{what} on {len(a)} of {world} ranks (up to "
                         f"{a.value[i]:.3g})", a, i, cfg, metric=metric, open_after=cfg.rule_open_after)]
    ranks = a.index.tolist()
    host_ix = [int(topo.host_of[r]) if r < topo.host_of.size else -1 for r in ranks]
    per_host: dict[int, list[int]] = {}
    for i, h in enumerate(host_ix):
        if h >= 0 and by_host:
            per_host.setdefault(h, []).append(i)
    out = []
    whole: set[int] = set()
    for h, rows in per_host.items():
        size = int(np.count_nonzero(topo.host_of[:frame.seen.size] == h))
        if len(rows) < 2 or len(rows) < cfg.slow_host_fraction * size:
            continue
        whole.update(rows)
        i = max(rows, key=lambda j: float(a.value[j]))
        name = topo.hosts[h]
        out.append(_finding(rule, f"host:{name}", "host", frame.step, f"host {name}: {what} on {len(rows)} of its "
                            f"{size} ranks (up to {a.value[i]:.3g}, threshold {a.threshold[i]:.3g})", a, i, cfg,
                            metric=metric, ranks=sorted(ranks[j] for j in rows), host=name,
                            open_after=cfg.rule_open_after))
    for i, rank in enumerate(ranks):
        if i in whole:
            continue
        h = host_ix[i]
        host = topo.hosts[h] if h >= 0 else None
        out.append(_finding(rule, f"rank:{rank}", "rank", frame.step, f"rank {rank} ({host}): {what} "
                            f"{a.value[i]:.3g} (threshold {a.threshold[i]:.3g})", a, i, cfg, metric=metric,
                            ranks=[rank], host=host, open_after=cfg.rule_open_after))
    return out


def _steps(frame: Frame, topo: Topology, state: SignalState, cfg: DetectionConfig,
           timings: dict[str, float]) -> list[Finding]:
    out: list[Finding] = []
    world = frame.seen.size
    t0 = time.perf_counter()
    gc = frame.phases[PHASE_INDEX["gc_ms"]]
    st1, a = r1.evaluate(gc, _grow(state.rules.get("r1:gc"), world, "run"),
                         r1.Params(upper=cfg.r1_gc_max_ms, k=cfg.r1_gc_k))
    state.rules["r1:gc"] = st1
    gc_findings = _rank_findings("R1", a, topo, frame, cfg, "GC pause (T8) ms", "T8", by_host=False)
    for f in gc_findings:
        f.open_after = 1  # R1's own k is its persistence
        f.cause_phase = "gc_ms"
        f.cause, f.suggestion = advise("gc_ms").cause, advise("gc_ms").suggestion
    out.extend(gc_findings)
    _timed(timings, "R1", t0)

    t0 = time.perf_counter()
    step_ms = float(np.nanmax(frame.duration_ms))
    data_ms = frame.phases[PHASE_INDEX["data_ms"]]
    d1 = frame.batch / (data_ms / 1e3)
    d1 = d1[np.isfinite(d1) & (data_ms > 0)]
    series = (("step_throughput", "step throughput (steps/s)", 1e3 / step_ms if step_ms > 0 else np.nan, 0),
              ("D1", "D1 DataLoader throughput (batch/s)", float(np.median(d1)) if d1.size else np.nan,
               cfg.r3_adapt_after))
    # step throughput keeps the spec's bare FIFO (every value enters): the slow-step scope owns step
    # time (baseline, change points), R3 marks a change's onset; D1 holds alarming values out
    for metric, label, value, adapt in series:
        sk = f"r3:{metric}"
        st3, a = r3.evaluate(np.array([value]), state.rules.get(sk), r3.Params(
            warmup=cfg.r3_warmup, length=cfg.r3_length, k=cfg.r3_k, min_deviation=cfg.r3_min_deviation,
            adapt_after=adapt))
        state.rules[sk] = st3
        for i in range(len(a)):
            out.append(_finding("R3", "job", "job", frame.step, f"{label} {a.value[i]:.3g} outside its window "
                                f"(mean {a.baseline[i]:.3g})", a, i, cfg, metric=metric,
                                open_after=cfg.rule_open_after))
    _timed(timings, "R3", t0)

    t0 = time.perf_counter()
    ratio = r10.share(frame.phases[PHASE_INDEX["interstep_cpu_ms"]], frame.duration_ms)
    st10, a = r10.evaluate(ratio, _grow(state.rules.get("r10"), world, "pos"),
                           r10.Params(severe=cfg.r10_severe, k=cfg.r10_k, min_ratio=cfg.r10_min_ratio))
    state.rules["r10"] = st10
    out.extend(_rank_findings("R10", a, topo, frame, cfg, "inter-step CPU share", "interstep_share"))
    _timed(timings, "R10", t0)
    return out


def _column(columns: dict[str, FloatArray], key: str, world: int, fill: float) -> FloatArray:
    """`columns[key]`, created (`world` values of `fill`) the first time the key is seen."""
    col = columns.get(key)
    if col is None:
        col = columns[key] = np.full(world, fill)
    return col


def _kernels(frame: Frame, topo: Topology, state: SignalState, cfg: DetectionConfig,
             timings: dict[str, float]) -> list[Finding]:
    out: list[Finding] = []
    world = frame.seen.size
    # per key, per rank columns from the row-shaped summaries
    compute: dict[str, FloatArray] = {}
    compute_flops: dict[str, FloatArray] = {}
    compute_calls: dict[str, FloatArray] = {}
    # collectives: each rank's bandwidth, bytes over its transfer time (its kernel time less its wait for
    # the group's last arriver: comm_columns.transfer_ns; a domain's point-to-point keys judged together)
    comm: dict[str, tuple[FloatArray, str]] = {}
    collectives = {name: col for name, col in comm_columns(frame).items()
                   if col.domain in DOMAINS and np.isfinite(col.nbytes).any()}
    for domain in sorted({str(col.domain) for col in collectives.values()}):
        names = [n for n, col in collectives.items() if col.domain == domain]
        in_domain = topo.groups[DOMAINS.index(domain), :world]
        for subset in [names] if domain in POINT_TO_POINT else [[n] for n in names]:
            for name, transfer in zip(subset, transfer_ns([collectives[n] for n in subset], in_domain), strict=True):
                comm[name] = (collectives[name].nbytes / transfer, domain)
    copy: dict[str, FloatArray] = {}
    launch: dict[str, tuple[FloatArray, FloatArray, FloatArray]] = {}
    for rank, entries, _other in frame.kernels:
        if rank >= world:
            continue
        for key, cat, count, total_ns, flops, nbytes, _domain, l_mean, l_mad, direction in (e[:10] for e in entries):
            if not isinstance(total_ns, int) or total_ns <= 0:
                continue
            # columns are allocated once per key (not per entry: setdefault's default is built every call,
            # which made this loop O(world²) per step)
            if isinstance(flops, (int, float)) and flops > 0:
                _column(compute, str(key), world, np.nan)[rank] = flops / total_ns * 1e9
                _column(compute_calls, str(key), world, np.nan)[rank] = float(count)  # type: ignore[arg-type]
                _column(compute_flops, str(key), world, 0.0)[rank] = flops
            if cat == "memcpy" and isinstance(nbytes, int):
                _column(copy, str(direction or key), world, np.nan)[rank] = nbytes / total_ns
            if isinstance(l_mean, (int, float)) and isinstance(l_mad, (int, float)):
                cols = launch.get(str(key))
                if cols is None:
                    cols = launch[str(key)] = (np.full(world, np.nan), np.full(world, np.nan), np.zeros(world))
                cols[0][rank], cols[1][rank], cols[2][rank] = l_mean, l_mad, float(count)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    weighted, weight = np.zeros(world), np.zeros(world)
    job_ratio: list[float] = []
    job_flops: list[float] = []
    for key, p in compute.items():
        # P = FLOPs of the calls the model makes / device time of the calls launched (repeated work halves it)
        calls = compute_calls[key]
        state.rules[f"r4c:{key}"], model = r4.model_calls(calls, state.rules.get(f"r4c:{key}"), cfg.r4_bench_samples)
        p = np.where(calls >= 1, p * model / np.where(calls >= 1, calls, 1.0), p)
        sk = f"r4:{key}"
        med = np.array([float(np.nanmedian(p))])
        st4, a = r4.evaluate(med, state.rules.get(sk), r4.Params(history=cfg.r4_history, iqr_k=cfg.r4_iqr_k,
                                                                bench_samples=cfg.r4_bench_samples,
                                                                p_bench=cfg.r4_p_bench,
                                                                min_deviation=cfg.r4_trend_min_deviation))
        state.rules[sk] = st4
        for i in range(len(a)):
            out.append(_finding("R4", "job", "job", frame.step, f"kernel {key}: efficiency {a.value[i]:.2f} of "
                                "benchmark, outside its IQR fences", a, i, cfg, metric=key,
                                open_after=cfg.rule_open_after))
        if np.isfinite(st4.bench[0]) and np.isfinite(med[0]):
            job_ratio.append(float(med[0] / st4.bench[0]))
            job_flops.append(float(compute_flops[key].sum()))
        ratio = p / med[0]
        ok = np.isfinite(ratio)
        w = compute_flops[key]
        weighted[ok] += ratio[ok] * w[ok]
        weight[ok] += w[ok]
    if job_ratio and sum(job_flops) > 0:
        # the job's compute as one R4 series: each kernel's ratio to its benchmark, FLOP-weighted. Each kernel's
        # median carries its own rank noise (a kernel of one PP stage: a median over few ranks), so its series
        # needs r4_trend_min_deviation (10 %); over every kernel that noise averages out and what is left is the
        # job-wide step jitter (1.5 %): a job-wide slowdown of a few percent (spec §4 kernel compile defect,
        # "R4, R8") stands 4 sigma out at r4_compute_min_deviation (6 %)
        w = np.asarray(job_flops)
        agg = np.array([float(np.dot(w, np.asarray(job_ratio)) / w.sum())])
        stc, a = r4.evaluate(agg, state.rules.get("r4:compute"), r4.Params(
            history=cfg.r4_history, iqr_k=cfg.r4_iqr_k, p_bench=1.0, min_deviation=cfg.r4_compute_min_deviation))
        state.rules["r4:compute"] = stc
        for i in range(len(a)):
            out.append(_finding("R4", "job", "job", frame.step, f"compute kernels ({len(job_ratio)}, FLOP-weighted): "
                                f"efficiency {a.value[i]:.2f} of benchmark, outside its IQR fences", a, i, cfg,
                                metric="compute", open_after=cfg.rule_open_after))
    if compute:
        # ranks against each other on ALL their compute kernels at once (FLOP-weighted mean of each
        # kernel's FLOP/s ratio to the job's median): a degraded or throttled chip is slow on most of
        # them, while per-kernel jitter averages out; one cross-section per kernel flagged some rank's
        # noisiest kernel every few steps (8 % jitter, dozens of kernels: false alarms)
        rank_ratio = np.where(weight > 0, weighted / np.where(weight > 0, weight, 1.0), np.nan)
        cross = r4.cross_section(rank_ratio, cfg.r4_iqr_k, min_deviation=cfg.r4_min_deviation)
        low = cross.value < cross.baseline
        slow = Alarms(cross.index[low], cross.value[low], cross.baseline[low], cross.threshold[low])
        out.extend(_rank_findings("R4", slow, topo, frame, cfg, "compute kernels' FLOP/s ratio to the job's median "
                                  "(FLOP-weighted)", "compute", present=int(np.isfinite(rank_ratio).sum())))
    _timed(timings, "R4", t0)

    t0 = time.perf_counter()
    for key, (bw, domain) in comm.items():
        groups = topo.groups[DOMAINS.index(domain), :world]
        sk = f"r5:{key}"
        st5, a = r5.evaluate(bw, groups, state.rules.get(sk), r5.Params(periods=cfg.r5_periods, k=cfg.r5_k,
                                                                               min_deviation=cfg.r5_min_deviation))
        state.rules[sk] = st5
        low = a.value < a.baseline
        cand_groups: set[int] = set()
        for i, rank in enumerate(a.index.tolist()):
            if not low[i]:
                continue
            g = int(groups[rank])
            cand_groups.add(g)
            h = int(topo.host_of[rank])
            host = topo.hosts[h] if h >= 0 else None
            link = f"{domain} group {g}: rank {rank} ({host})"
            out.append(_finding("R5", f"link:{domain}/{g}/{rank}", "link", frame.step,
                                f"slow link {link}: {key} bandwidth {a.value[i]:.2f} GB/s vs group "
                                f"{a.baseline[i]:.2f}", a, i, cfg, metric=key, ranks=[rank], host=host,
                                domain=domain, group=g, link=link, open_after=cfg.rule_open_after))
        ok = np.isfinite(bw) & (groups >= 0)
        gids = np.unique(groups[ok])
        if gids.size:
            means = np.array([float(np.mean(bw[ok & (groups == g)])) for g in gids.tolist()])
            has = np.array([int(g) in cand_groups for g in gids.tolist()])
            a6 = r6.evaluate(means, has, r6.Params(k=cfg.r6_k, min_deviation=cfg.r6_min_deviation))
            for i, gi in enumerate(a6.index.tolist()):
                if a6.value[i] >= a6.baseline[i]:
                    continue
                g = int(gids[gi])
                members = np.flatnonzero(groups == g).tolist()
                out.append(_finding("R6", f"group:{domain}/{g}", "group", frame.step,
                                    f"slow group {domain.upper()} {g}: {key} bandwidth {a6.value[i]:.2f} GB/s vs "
                                    f"other groups {a6.baseline[i]:.2f}", a6, i, cfg, metric=key, ranks=members,
                                    domain=domain, group=g, open_after=cfg.rule_open_after))
    _timed(timings, "R5/R6", t0)

    t0 = time.perf_counter()
    v = r7.gap(frame.duration_ms, frame.phases[PHASE_INDEX["interstep_cpu_ms"]], frame.kernel_ns / 1e6)
    vv = v[np.isfinite(v)]
    if vv.size:
        st7, a = r7.evaluate(np.array([float(np.median(vv))]), state.rules.get("r7"),
                             r7.Params(bound=cfg.r7_bound, jump=cfg.r7_jump))
        state.rules["r7"] = st7
        for i in range(len(a)):
            out.append(_finding("R7", "job", "job", frame.step, f"minority-kernel gap V {a.value[i]:.2f} "
                                f"(threshold {a.threshold[i]:.2f})", a, i, cfg, metric="V_minority",
                                open_after=cfg.rule_open_after))
    _timed(timings, "R7", t0)

    t0 = time.perf_counter()
    for key, (mean, mad, count) in launch.items():
        a = r8.evaluate(mean, mad, count, r8.Params(min_cu=cfg.r8_min_cu))
        out.extend(_rank_findings("R8", a, topo, frame, cfg, f"launch-latency uniformity CU of {key}", "T15",
                                  present=int(np.count_nonzero(np.isfinite(mean) & np.isfinite(mad) & (count >= 2)))))
    _timed(timings, "R8", t0)

    t0 = time.perf_counter()
    for direction, rate in copy.items():
        sk = f"r9:{direction}"
        st9, a = r9.evaluate(rate, _grow(state.rules.get(sk), world, "pos"),
                             r9.Params(low=cfg.r9_low_gbps, high=cfg.r9_high_gbps,
                                       learned_low=cfg.r9_learned_low, learned_high=cfg.r9_learned_high))
        state.rules[sk] = st9
        out.extend(_rank_findings("R9", a, topo, frame, cfg, f"{direction} copy rate GB/s", f"copy_{direction}",
                                  present=int(np.isfinite(rate).sum())))
    _timed(timings, "R9", t0)
    return out


FOLLOW_RULES = ("R3", "R4", "R7", "R8", "R9", "R10")


def follow_slow_step(findings: list[Finding]) -> list[Finding]:
    """Job-wide rule findings of a step whose slow step was joined to a culprit follow it there.

    R3 on step throughput, a job-wide R4/R7/R8/R9/R10 in the same step describe the same slow
    steps that the join (streams/detect/incidents/join.py) attributed to a slow rank or host: one
    problem, one incident carrying every rule id, not a second job-scope incident beside it.
    Run after the join, which decides where the slow step goes.
    """
    slow = next((f for f in findings if f.rule == "SLOW_STEP" and f.key != "job" and f.family == "perf"), None)
    if slow is None:
        return findings
    for f in findings:
        if f.key == "job" and f.rule in FOLLOW_RULES and f.family == "perf":
            f.key, f.scope, f.ranks, f.host = slow.key, slow.scope, list(slow.ranks), slow.host
            f.open_after = max(f.open_after, slow.open_after)
    return findings


def name_slow_groups(findings: list[Finding]) -> list[Finding]:
    """An R6 finding the join left on its group (not a symptom of a slow link, rank or host) is a
    slow-group incident: it carries the SLOW_GROUP scope id beside R6. Run after the join."""
    extra = []
    for f in findings:
        if f.rule == "R6" and f.scope == "group" and f.key.startswith("group:"):
            g = copy.copy(f)
            g.rule = "SLOW_GROUP"
            g.ranks = list(f.ranks)
            g.evidence = dict(f.evidence)
            extra.append(g)
    return findings + extra
