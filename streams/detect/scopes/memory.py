"""Device memory from the steps' own allocator statistics (contract 1.5, issue #44 item 4).

A rank that sends `mem_peak_bytes` / `mem_reserved_bytes` / `mem_capacity_bytes` says more than the
node sampler's `mem_pct` can: the peak is what the step allocated (a leak grows it step after step),
reserved is what the caching allocator holds from the device (it grows past the peak when the cache
fragments), capacity is what both are a share of. The forecast (`rules/oom_forecast.py`, the same trend
test the device samples get) runs on both, one sample per step, its clock the step index:

- the peak's trend reaches capacity within the horizon: a leak, one OOM incident naming the step it will
  run out at, the growth per step and, when the job declared its model's shape, what the model should
  take (seed 004's formulas, `streams/model/memory.py`): the excess over it is not the model's;
- reserved's trend reaches capacity while the peak stays flat: fragmentation. The allocator will fail an
  allocation it holds enough memory for ("reserved but unallocated memory is large"), so it is named as
  such, with its own remedy (expandable segments) instead of a leak hunt.

Memory that is high but steady, however close to capacity, and a cache kept reserved far above the peak
by design have no growth and raise nothing. A rank with these statistics is judged here, not by its
device's `mem_pct` forecast (`JobEngine` drops that one: one problem, one incident).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.advice import advise_cause, advise_rule
from streams.detect.rules import oom_forecast as oom
from streams.detect.rules.base import BoolArray, FloatArray
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame, ReportedLayout

GIB = float(2**30)
LEAK, FRAGMENTATION = advise_rule("OOM"), advise_cause("fragmentation")


@dataclass(frozen=True, slots=True)
class Params:
    oom_horizon_steps: float
    oom_min_growth_pct_per_step: float
    oom_window: int
    oom_t_min: float
    resolve_after_steps: int

    def forecast(self) -> oom.Params:
        """The forecast in steps (its clock is the step index); the warm-up is a starting job's allocator
        filling its cache, as for the device samples."""
        return oom.Params(horizon_s=self.oom_horizon_steps, min_growth_per_s=self.oom_min_growth_pct_per_step,
                          window=self.oom_window, t_min=self.oom_t_min)


@dataclass(slots=True)
class MemoryState:
    peak: oom.State | None = None
    reserved: oom.State | None = None
    reporting: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # ranks that sent memory
    expected_bytes: float | None = None  # the model's expected peak per rank (the job's declared shape)
    expected_dominant: str = ""  # what holds most of it


def evaluate(frame: Frame, topo: ReportedLayout, state: MemoryState,
             params: Params) -> tuple[MemoryState, list[Finding]]:
    """Push the frame's step memory (one sample per rank) and forecast; nothing when no rank sent any."""
    mem = frame.memory
    if mem is None:
        return state, []
    world = frame.seen.size
    peak, reserved, capacity = mem[0], mem[1], mem[2]
    usable = frame.seen & (capacity > 0)
    if state.reporting.size < world:
        state.reporting = np.r_[state.reporting, np.zeros(world - state.reporting.size, dtype=bool)]
    state.reporting[usable & np.isfinite(peak)] = True
    with np.errstate(divide="ignore", invalid="ignore"):
        peak_pct = np.where(usable, 100.0 * peak / capacity, np.nan)
        reserved_pct = np.where(usable, 100.0 * reserved / capacity, np.nan)
    p = params.forecast()
    at = np.full(world, float(frame.step))
    state.peak, leak = oom.evaluate(at, peak_pct, _sized(state.peak, world), p)
    state.reserved, held = oom.evaluate(at, reserved_pct, _sized(state.reserved, world), p)
    # a leak runs out when reserved cannot grow: where reserved's forecast fires too, its step is the earlier
    reserved_left = dict(zip(held.index.tolist(), held.seconds_left.tolist(), strict=True))
    out = [_leak(frame, topo, state, params, leak, i, capacity, reserved_left.get(int(leak.index[i])))
           for i in range(len(leak))]
    leaking = set(leak.index.tolist())
    candidates = [i for i in range(len(held)) if int(held.index[i]) not in leaking]
    if candidates:
        rows = held.index[candidates]
        flat = oom.growth(state.peak, rows) < p.min_growth_per_s  # the peak itself does not grow
        out.extend(_fragmented(frame, topo, params, held, i, capacity, peak)
                   for i, still in zip(candidates, flat.tolist(), strict=True) if still)
    return state, out


def _sized(st: oom.State | None, world: int) -> oom.State | None:
    return st if st is not None and st.pos.size == world else None


def _where(topo: ReportedLayout, rank: int) -> tuple[str | None, str]:
    host = topo.hosts[int(topo.host_of[rank])] if rank < topo.host_of.size and topo.host_of[rank] >= 0 else None
    return host, f"rank {rank}" + (f" ({host})" if host else "")


def _leak(frame: Frame, topo: ReportedLayout, state: MemoryState, params: Params, fc: oom.Forecast, i: int,
          capacity: FloatArray, reserved_left: float | None) -> Finding:
    r = int(fc.index[i])
    cap = float(capacity[r])
    left = float(fc.seconds_left[i]) if reserved_left is None else min(float(fc.seconds_left[i]), reserved_left)
    steps_left = int(np.ceil(left))
    level, growth = float(fc.level[i]), float(fc.growth_per_s[i])
    host, who = _where(topo, r)
    evidence = {"oom_step": float(frame.step + steps_left), "steps_left": float(steps_left),
                "growth_pct_per_step": growth, "growth_bytes_per_step": growth / 100.0 * cap,
                "peak_bytes": level / 100.0 * cap, "capacity_bytes": cap}
    model = ""
    if state.expected_bytes:
        evidence["expected_peak_bytes"] = state.expected_bytes
        excess = level / 100.0 * cap - state.expected_bytes
        model = (f"; the model's shape accounts for {state.expected_bytes / GIB:.1f} GiB "
                 f"(mostly {state.expected_dominant.replace('_', ' ')})" + (
                     f", {excess / GIB:.1f} GiB more is held" if excess > 0 else ""))
    return Finding(
        rule="OOM", key=f"rank:{r}", scope="rank", step=frame.step, metric="mem_peak_bytes",
        ranks=[r], host=host,
        summary=(f"{who} will run out of device memory at ~step {frame.step + steps_left:,} (in {steps_left:,} "
                 f"steps): allocated peak {level / 100 * cap / GIB:.1f} of {cap / GIB:.0f} GiB, "
                 f"+{growth / 100 * cap / 2**20:.0f} MiB/step{model}")[:300],
        observed=level, expected=(100.0 * state.expected_bytes / cap) if state.expected_bytes else None,
        threshold=100.0, unit="%", evidence=evidence, severity="warning", open_after=2,
        resolve_after=params.resolve_after_steps,
        cause=LEAK.cause, suggestion=LEAK.suggestion)


def _fragmented(frame: Frame, topo: ReportedLayout, params: Params, fc: oom.Forecast, i: int, capacity: FloatArray,
                peak: FloatArray) -> Finding:
    r = int(fc.index[i])
    cap = float(capacity[r])
    steps_left = int(np.ceil(float(fc.seconds_left[i])))
    level, growth = float(fc.level[i]), float(fc.growth_per_s[i])
    host, who = _where(topo, r)
    allocated = float(peak[r]) if np.isfinite(peak[r]) else float("nan")
    return Finding(
        rule="OOM", key=f"rank:{r}", scope="rank", step=frame.step, metric="mem_reserved_bytes",
        ranks=[r],
        host=host,
        summary=(f"{who}: the allocator's reserved memory grows while its allocated peak stays at "
                 f"{allocated / GIB:.1f} GiB (fragmentation): reserved {level / 100 * cap / GIB:.1f} of "
                 f"{cap / GIB:.0f} GiB, +{growth / 100 * cap / 2**20:.0f} MiB/step, full at ~step "
                 f"{frame.step + steps_left:,} (in {steps_left:,} steps)")[:300],
        observed=level, expected=100.0 * allocated / cap if np.isfinite(allocated) else None, threshold=100.0,
        unit="%", severity="warning", open_after=2, resolve_after=params.resolve_after_steps,
        evidence={"oom_step": float(frame.step + steps_left), "steps_left": float(steps_left),
                  "growth_pct_per_step": growth, "reserved_bytes": level / 100.0 * cap, "peak_bytes": allocated,
                  "capacity_bytes": cap, "fragmentation": 1.0},
        cause=FRAGMENTATION.cause, suggestion=FRAGMENTATION.suggestion)
