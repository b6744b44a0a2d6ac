"""The step feed: R1 on T8 (GC pause per rank), R3 on the job's step throughput and D1 (DataLoader
throughput), R10 (inter-step CPU share) per rank, on each released frame."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from streams.advice import advise
from streams.detect.rules import r01_static_bounds as r1
from streams.detect.rules import r03_throughput_window as r3
from streams.detect.rules import r10_interstep_cpu as r10
from streams.detect.scopes.finding import Finding
from streams.detect.signals.shared import FindingParams, SignalState, grow, rank_findings, rule_finding, timed
from streams.detect.windows.step_frames import PHASE_INDEX, Frame, ReportedLayout


@dataclass(frozen=True, slots=True)
class StepParams(FindingParams):
    """The settings the step feed reads (infra/settings.py `DetectionConfig.params` fills them)."""

    r1_gc_max_ms: float
    r1_gc_k: int
    r3_warmup: int
    r3_length: int
    r3_k: float
    r3_min_deviation: float
    r3_adapt_after: int
    r10_severe: float
    r10_k: float
    r10_min_ratio: float


def step_findings(frame: Frame, topo: ReportedLayout, state: SignalState, params: StepParams,
                  timings: dict[str, float]) -> list[Finding]:
    out: list[Finding] = []
    world = frame.seen.size
    t0 = time.perf_counter()
    gc = frame.phases[PHASE_INDEX["gc_ms"]]
    st1, a = r1.evaluate(gc, grow(state.rules.get("r1:gc"), world, "run"),
                         r1.Params(upper=params.r1_gc_max_ms, k=params.r1_gc_k))
    state.rules["r1:gc"] = st1
    gc_findings = rank_findings("R1", a, topo, frame, params, "GC pause (T8) ms", "T8", by_host=False)
    for f in gc_findings:
        f.open_after = 1  # R1's own k is its persistence
        f.cause_phase = "gc_ms"
        f.cause, f.suggestion = advise("gc_ms").cause, advise("gc_ms").suggestion
    out.extend(gc_findings)
    timed(timings, "R1", t0)

    t0 = time.perf_counter()
    step_ms = float(np.nanmax(frame.duration_ms))
    data_ms = frame.phases[PHASE_INDEX["data_ms"]]
    d1 = frame.batch / (data_ms / 1e3)
    d1 = d1[np.isfinite(d1) & (data_ms > 0)]
    series = (("step_throughput", "step throughput (steps/s)", 1e3 / step_ms if step_ms > 0 else np.nan, 0),
              ("D1", "D1 DataLoader throughput (batch/s)", float(np.median(d1)) if d1.size else np.nan,
               params.r3_adapt_after))
    # step throughput keeps the spec's bare FIFO (every value enters): the slow-step scope owns step
    # time (baseline, change points), R3 marks a change's onset; D1 holds alarming values out
    for metric, label, value, adapt in series:
        sk = f"r3:{metric}"
        st3, a = r3.evaluate(np.array([value]), state.rules.get(sk), r3.Params(
            warmup=params.r3_warmup, length=params.r3_length, k=params.r3_k, min_deviation=params.r3_min_deviation,
            adapt_after=adapt))
        state.rules[sk] = st3
        for i in range(len(a)):
            out.append(rule_finding("R3", "job", "job", frame.step, f"{label} {a.value[i]:.3g} outside its window "
                                    f"(mean {a.baseline[i]:.3g})", a, i, params.resolve_after_steps, metric=metric,
                                    open_after=params.rule_open_after))
    timed(timings, "R3", t0)

    t0 = time.perf_counter()
    ratio = r10.share(frame.phases[PHASE_INDEX["interstep_cpu_ms"]], frame.duration_ms)
    st10, a = r10.evaluate(ratio, grow(state.rules.get("r10"), world, "pos"),
                           r10.Params(severe=params.r10_severe, k=params.r10_k, min_ratio=params.r10_min_ratio))
    state.rules["r10"] = st10
    out.extend(rank_findings("R10", a, topo, frame, params, "inter-step CPU share", "interstep_share"))
    timed(timings, "R10", t0)
    return out
