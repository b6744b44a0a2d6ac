"""Slow steps: a step well above the job's own history (Hermes counts > 10 % above baseline).

The job's step time is the slowest group's step time. The baseline is the median of the
last `baseline_steps` normal steps after `warmup_steps`; slow steps do not enter it, so a
run of slow steps cannot drag the baseline up. Consecutive slow steps form one incident:
`open` at the first, `update` as the run grows, `resolved` at the next normal step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from schemas import Incident
from streams.analysis.advisor import advise


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    peak_ms: float
    baseline_ms: float
    phase_excess: dict[str, float] = field(default_factory=dict)


class SlowStepDetector:
    """Per-job detector; feed it job steps in step order."""

    def __init__(self, job: str, warmup_steps: int, baseline_steps: int, ratio: float) -> None:
        self.job = job
        self._warmup = warmup_steps
        self._ratio = ratio
        self._seen = 0
        self._history: deque[float] = deque(maxlen=baseline_steps)
        self._phase_history: dict[str, deque[float]] = {}
        self._baseline_len = baseline_steps
        self._run: _Run | None = None
        self.slow_steps: list[int] = []

    def baseline_ms(self) -> float | None:
        return float(np.median(self._history)) if self._history else None

    def observe(self, step: int, step_ms: float, phase_max: dict[str, float], now_ns: int) -> list[Incident]:
        self._seen += 1
        baseline = self.baseline_ms()
        if self._seen <= self._warmup or baseline is None:
            self._remember(step_ms, phase_max)
            return []
        if step_ms > self._ratio * baseline:
            self.slow_steps.append(step)
            excess = {
                name: value - float(np.median(hist))
                for name, value in phase_max.items()
                if (hist := self._phase_history.get(name))
            }
            if self._run is None:
                self._run = _Run(step, step, step_ms, baseline, excess)
                return [self._incident("open", now_ns)]
            run = self._run
            run.last = step
            run.peak_ms = max(run.peak_ms, step_ms)
            for name, value in excess.items():
                run.phase_excess[name] = max(run.phase_excess.get(name, 0.0), value)
            return [self._incident("update", now_ns)]
        self._remember(step_ms, phase_max)
        return self.close(now_ns)

    def close(self, now_ns: int) -> list[Incident]:
        """Resolve the open run, if any (a normal step arrived, or the job ended)."""
        if self._run is None:
            return []
        incident = self._incident("resolved", now_ns)
        self._run = None
        return [incident]

    def _remember(self, step_ms: float, phase_max: dict[str, float]) -> None:
        self._history.append(step_ms)
        for name, value in phase_max.items():
            self._phase_history.setdefault(name, deque(maxlen=self._baseline_len)).append(value)

    def _incident(self, state: str, now_ns: int) -> Incident:
        run = self._run
        assert run is not None
        ignored = ("comm_exposed_ms",)  # waiting is the symptom, not the cause
        candidates = {k: v for k, v in run.phase_excess.items() if k not in ignored and v > 0}
        phase = max(candidates, key=lambda k: candidates[k]) if candidates else None
        advice = advise(phase)
        ratio = run.peak_ms / run.baseline_ms
        steps = f"step {run.first}" if run.first == run.last else f"steps {run.first}–{run.last}"
        return Incident(
            incident_id=f"SLOW_STEP:{self.job}:s{run.first}",
            job=self.job, rule="SLOW_STEP", state=state,  # type: ignore[arg-type]
            severity="critical" if ratio > 1.5 else "warning", scope="job",
            summary=f"{steps} up to {run.peak_ms:.0f} ms, {ratio:.2f}x the {run.baseline_ms:.0f} ms baseline"
            + (f"; largest growth in {phase} (+{candidates[phase]:.0f} ms)" if phase else ""),
            detected_ns=now_ns, step_first=run.first, step_last=run.last,
            observed=run.peak_ms, expected=run.baseline_ms, threshold=self._ratio * run.baseline_ms,
            unit="ms", evidence={f"excess_{k}": v for k, v in sorted(run.phase_excess.items())},
            cause=advice.cause, suggestion=advice.suggestion,
        )
