"""Temporal breakdown of device time: compute, communication, overlap, exposed communication, free.

Definitions follow Ascend's Overlap Analysis / step_trace_time.csv, so figures compare:
compute = |∪ compute tasks|, communication = |∪ collectives|, overlapped = |compute ∩ comm|,
communication_not_overlapped = communication − overlapped, span = first task start to last
task end, free = span − compute − communication_not_overlapped − memory_not_overlapped.
HolisticTraceAnalysis' temporal breakdown (idle / compute / non-compute over the kernel span)
is the same computation grouped differently: idle = span − |∪ all tasks|.

Kernels belong to the step whose host range launched them (runtime call by correlation id),
which is what the GPU did *for* that step even when it runs late. When the CPU runs so far ahead
that consecutive steps' kernels interleave on the device (step N's last collective still running
while step N+1's first kernels start on another stream), launch assignment counts the overlap in
both steps and calls the other step's busy time "free" (per-step free then adds up to more than
the whole trace's idle time). Then the device timeline is cut instead: step N's window runs from
the first device start of its kernels to that of step N+1's, each step is the tasks clipped to
its window, and the windows partition the device time, so per-step free adds up to the idle time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.profiles.analysis.intervals import intersection_total, total, union
from streams.profiles.model import COMMUNICATION, COMPUTE, I64, Kernels, Profile


@dataclass(frozen=True, slots=True)
class Breakdown:
    """One step (or a whole trace: step = -1), µs."""

    step: int
    span: float
    compute: float
    communication: float
    overlapped: float
    communication_not_overlapped: float
    memory_not_overlapped: float
    free: float
    busy: float  # |∪ all device tasks|
    preparing: float = 0.0  # host step start -> first device task

    @property
    def idle(self) -> float:
        return self.span - self.busy

    @property
    def non_compute(self) -> float:
        return self.span - self.idle - self.compute

    @property
    def overlap_ratio(self) -> float:
        return self.overlapped / self.communication if self.communication > 0 else 1.0

    def as_dict(self) -> dict[str, float]:
        return {
            "step": float(self.step), "span_us": self.span, "compute_us": self.compute,
            "communication_us": self.communication, "overlapped_us": self.overlapped,
            "communication_not_overlapped_us": self.communication_not_overlapped,
            "memory_not_overlapped_us": self.memory_not_overlapped, "free_us": self.free,
            "idle_us": self.idle, "non_compute_us": self.non_compute, "preparing_us": self.preparing,
        }


def breakdown_of(kernels: Kernels, step: int = -1, host_start: float | None = None,
                 window: tuple[float, float] | None = None) -> Breakdown:
    """`window`: the device-time window the (clipped) tasks belong to; the span is then the window's length."""
    if len(kernels) == 0:
        span0 = window[1] - window[0] if window is not None else 0.0
        return Breakdown(step, span0, 0.0, 0.0, 0.0, 0.0, 0.0, span0, 0.0)
    ends = kernels.ts + kernels.dur
    all_s, all_e = union(kernels.ts, ends)
    comp = kernels.kind == COMPUTE
    comm = kernels.kind == COMMUNICATION
    rest = ~(comp | comm)
    c_s, c_e = union(kernels.ts[comp], ends[comp])
    m_s, m_e = union(kernels.ts[comm], ends[comm])
    compute = total(c_s, c_e)
    communication = total(m_s, m_e)
    overlapped = intersection_total(c_s, c_e, m_s, m_e)
    busy = total(all_s, all_e)
    span = float(all_e[-1] - all_s[0]) if window is None else window[1] - window[0]
    comm_exposed = communication - overlapped
    # whatever else the device did that neither compute nor communication covers (memcpy, memset, sync)
    cm_s, cm_e = union(np.concatenate([c_s, m_s]), np.concatenate([c_e, m_e]))
    memory_exposed = busy - total(cm_s, cm_e) if rest.any() else 0.0
    free = span - compute - comm_exposed - memory_exposed
    preparing = max(0.0, float(all_s[0]) - host_start) if host_start is not None else 0.0
    return Breakdown(step, span, compute, communication, overlapped, comm_exposed, memory_exposed, free, busy,
                     preparing)


def kernel_steps(profile: Profile) -> I64:
    """Step index (into profile.steps) of every kernel, by its launch's host time; -1 outside steps."""
    kernels = profile.kernels
    n = len(kernels)
    out = np.full(n, -1, dtype=np.int64)
    if not profile.steps or n == 0:
        return out
    host_ts = kernels.ts.copy()
    runtime = profile.runtime
    if len(runtime):
        valid = runtime.corr >= 0
        rc = runtime.corr[valid]
        rts = runtime.ts[valid]
        order = np.argsort(rc, kind="stable")
        rc, rts = rc[order], rts[order]
        pos = np.searchsorted(rc, kernels.corr)
        pos_c = np.minimum(pos, max(rc.size - 1, 0))
        found = (rc.size > 0) & (kernels.corr >= 0) & (rc[pos_c] == kernels.corr) if rc.size else np.zeros(n, bool)
        host_ts = np.where(found, rts[pos_c] if rc.size else host_ts, host_ts)
    starts = np.array([s.ts for s in profile.steps])
    ends = np.array([s.end for s in profile.steps])
    idx = np.searchsorted(starts, host_ts, side="right") - 1
    inside = (idx >= 0) & (host_ts < ends[np.maximum(idx, 0)])
    out[inside] = idx[inside]
    return out


def device_windows(kernels: Kernels, steps: I64, n_steps: int) -> list[tuple[float, float]] | None:
    """Per step, [its kernels' first device start, the next step's) — or None when the launch-assigned steps
    do not overlap on the device (the CPU does not run ahead of it): then launch assignment stands."""
    ends = kernels.ts + kernels.dur
    first = np.full(n_steps, np.inf)
    last = np.full(n_steps, -np.inf)
    inside = steps >= 0
    np.minimum.at(first, steps[inside], kernels.ts[inside])
    np.maximum.at(last, steps[inside], ends[inside])
    have = np.flatnonzero(np.isfinite(first))
    if have.size < 2 or not np.any(last[have[:-1]] > first[have[1:]]):
        return None
    starts = np.maximum.accumulate(first[have])  # a step cannot start on the device before the one before it
    stops = np.append(starts[1:], max(float(last[have].max()), float(starts[-1])))
    out = [(float(stops[-1]), float(stops[-1]))] * n_steps  # steps without kernels: empty windows
    for i, lo, hi in zip(have.tolist(), starts.tolist(), stops.tolist(), strict=True):
        out[i] = (lo, hi)
    return out


def _clip(kernels: Kernels, lo: float, hi: float) -> Kernels:
    ends = kernels.ts + kernels.dur
    keep = (ends > lo) & (kernels.ts < hi)
    part = kernels.take(keep)
    start = np.maximum(part.ts, lo)
    return Kernels(start, np.minimum(part.ts + part.dur, hi) - start, part.kind, part.stream, part.name, part.corr)


def step_breakdowns(profile: Profile) -> list[Breakdown]:
    """One breakdown per profiler step: the kernels the step launched, or its device-time window when the
    CPU runs ahead far enough for steps to interleave on the device (see the module docstring)."""
    if not profile.steps:
        return [breakdown_of(profile.kernels)] if len(profile.kernels) else []
    steps = kernel_steps(profile)
    windows = device_windows(profile.kernels, steps, len(profile.steps))
    out = []
    launched = profile.kernels.take(steps >= 0) if windows is not None else profile.kernels
    for i, step in enumerate(profile.steps):
        if windows is None:
            out.append(breakdown_of(profile.kernels.take(steps == i), step.number, step.ts))
        else:
            lo, hi = windows[i]
            out.append(breakdown_of(_clip(launched, lo, hi), step.number, step.ts, window=(lo, hi)))
    return out


def hta_breakdown(profile: Profile, hta_rounding: bool = False) -> Breakdown:
    """Whole-trace breakdown over the kernels HolisticTraceAnalysis keeps (launched before the last step).

    HTA drops the last profiler step (it may be incomplete) by keeping only kernels whose launch
    precedes the last `ProfilerStep#` start; with under two steps it keeps everything.
    `hta_rounding` reproduces HTA 0.5's handling of ns-resolution traces (start rounded up, end
    rounded down to whole µs), which shortens every kernel by up to 1 µs: our own figures are exact.
    """
    kernels = profile.kernels
    if len(profile.steps) >= 2 and len(profile.runtime):
        last_start = max(s.ts for s in profile.steps)
        launched = profile.runtime.corr[(profile.runtime.ts < last_start) & (profile.runtime.corr >= 0)]
        kernels = kernels.take(np.isin(kernels.corr, launched))
    if hta_rounding and np.any(kernels.ts != np.floor(kernels.ts)):
        start = np.ceil(kernels.ts)
        end = np.floor(kernels.ts + kernels.dur)
        kernels = Kernels(start, end - start, kernels.kind, kernels.stream, kernels.name, kernels.corr)
    return breakdown_of(kernels)
