"""Slow step (job scope): a step well above the job's own robust history, change-point aware.

Baseline = median of the last `baseline_steps` normal job step times (after `warmup_steps`);
a step is slow when it exceeds BOTH `slow_step_ratio` x baseline (Hermes' 10 %) and
baseline + `slow_step_mad_z` robust sigmas (1.4826 MAD), so a jittery but healthy job stays
quiet. Slow steps do not enter the baseline. When a run of slow steps lasts
`shift_steps` and is itself stable (spread below `shift_spread`), the job has shifted for
good (a new dataset, a changed config): the run stays ONE incident, resolved with
`shift=1` in its evidence, and the run's values become the new baseline (Greyhound watches
iteration time for such change points; this is the cheap, deterministic version). A run
caused by GC pauses is never a shift: a GC storm is a fault, not a new normal.
An incident opens after `slow_step_open_after` slow steps (one clean step between them allowed,
a flapping fault): one long step on its own
(an evaluation step shows in forward, a checkpoint in inter-step CPU) is part of healthy
training, not a slow step, and never enters the baseline either. A long step whose growth is
GC pauses is a finding at once (GC is never a planned step kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from steplens.config import DetectionConfig
from streams.analysis.advisor import advise
from streams.ingest.decode import PHASES
from streams.scopes.finding import Finding
from streams.windows.step_frames import Frame

IGNORED_CAUSES = ("comm_exposed_ms",)  # waiting is the symptom, not the cause


@dataclass(slots=True)
class SlowStepState:
    seen: int = 0
    history: list[float] = field(default_factory=list)
    phase_history: list[list[float]] = field(default_factory=list)  # per step: phase maxima
    run: list[float] = field(default_factory=list)
    shifts: int = 0


def evaluate(frame: Frame, state: SlowStepState, cfg: DetectionConfig) -> tuple[SlowStepState, list[Finding]]:
    if not frame.seen.any():
        return state, []
    step_ms = float(np.nanmax(frame.duration_ms))
    phase_max = [float(v) if np.isfinite(v) else 0.0 for v in np.nanmax(np.where(
        np.isfinite(frame.phases), frame.phases, -np.inf), axis=1)]
    state.seen += 1
    if state.seen <= cfg.warmup_steps or len(state.history) < 2:
        _remember(state, step_ms, phase_max, cfg)
        return state, []
    hist = np.asarray(state.history)
    baseline = float(np.median(hist))
    sigma = 1.4826 * float(np.median(np.abs(hist - baseline)))
    threshold = max(cfg.slow_step_ratio * baseline, baseline + cfg.slow_step_mad_z * sigma)
    if step_ms <= threshold:
        state.run.clear()
        _remember(state, step_ms, phase_max, cfg)
        return state, []
    state.run.append(step_ms)
    phase_hist = np.asarray(state.phase_history)
    excess = {name: phase_max[i] - float(np.median(phase_hist[:, i]))
              for i, name in enumerate(PHASES) if name not in IGNORED_CAUSES}
    cause = max(excess, key=lambda k: excess[k]) if excess and max(excess.values()) > 0 else None
    advice = advise(cause)
    ratio = step_ms / baseline
    evidence = {f"excess_{k}": round(v, 3) for k, v in excess.items() if v > 0}
    shifted = cause != "gc_ms" and _is_shift(state, cfg)  # GC pauses are never a healthy new normal
    if shifted:
        evidence["shift"] = 1.0
        state.shifts += 1
        state.history = list(state.run[-cfg.shift_steps:])
        state.run.clear()
    finding = Finding(
        rule="SLOW_STEP", key="job", scope="job", step=frame.step,
        summary=f"step {frame.step} took {step_ms:.0f} ms, {ratio:.2f}x the {baseline:.0f} ms baseline"
        + (f"; largest growth in {cause} (+{excess[cause]:.0f} ms)" if cause else "")
        + ("; the job has shifted to a new baseline" if shifted else ""),
        severity="critical" if ratio > 1.5 else "warning", metric="step_ms",
        observed=step_ms, expected=baseline, threshold=threshold, unit="ms", evidence=evidence,
        cause_phase=cause, cause=advice.cause, suggestion=advice.suggestion,
        open_after=1 if cause == "gc_ms" else cfg.slow_step_open_after, resolve_after=cfg.resolve_after_steps,
        candidate_gap=1,
    )
    if shifted:
        finding.evidence["resolve_now"] = 1.0
    return state, [finding]


def _is_shift(state: SlowStepState, cfg: DetectionConfig) -> bool:
    if len(state.run) < cfg.shift_steps:
        return False
    tail = np.asarray(state.run[-cfg.shift_steps:])
    med = float(np.median(tail))
    return float(np.median(np.abs(tail - med))) / med < cfg.shift_spread


def _remember(state: SlowStepState, step_ms: float, phase_max: list[float], cfg: DetectionConfig) -> None:
    state.history.append(step_ms)
    state.phase_history.append(phase_max)
    del state.history[:-cfg.baseline_steps]
    del state.phase_history[:-cfg.baseline_steps]
