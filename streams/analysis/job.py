"""Per-job aggregation of group summaries into job steps, feeding both detectors.

A job step is complete once the groups of one domain type that reported it cover the
whole world (e.g. all DP groups); then its time is the slowest group's. Steps are handed
to the slow-step detector in step order. A step still incomplete is released with what it
has once every group of a domain that covers the world has reported a step at least
`lateness_steps` later (group summaries of one group arrive in step order, so the missing
ones will not come), or when it falls `max_open_steps` behind the newest step.
A job ends when its `end` JobEvent has arrived and its last step has been released (in
whichever order those two happen).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import ControlCommand, Incident, JobEvent
from steplens.config import DetectionConfig
from streams.analysis.slow_rank import SlowRankDetector
from streams.analysis.slow_step import SlowStepDetector
from streams.records import GroupStep

Output = Incident | ControlCommand


@dataclass(slots=True)
class _PendingStep:
    covered: dict[str, int] = field(default_factory=dict)  # domain -> ranks covered
    step_ms: float = 0.0
    phase_max: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class JobStats:
    steps_released: int = 0
    steps_incomplete: int = 0
    late_summaries: int = 0


class JobAnalysis:
    """Pure processor for one job: GroupStep / JobEvent in, incidents and commands out."""

    def __init__(self, job: str, cfg: DetectionConfig, max_open_steps: int = 512) -> None:
        self.job = job
        self._lateness = cfg.window_lateness_steps
        self._max_open = max_open_steps
        self._group_newest: dict[str, dict[int, int]] = {}  # domain -> group -> newest step
        self._group_size: dict[str, dict[int, int]] = {}
        self.slow_steps = SlowStepDetector(job, cfg.warmup_steps, cfg.baseline_steps, cfg.slow_step_ratio)
        self.slow_ranks = SlowRankDetector(job, cfg.slow_rank_min_steps, cfg.resolve_after_steps, cfg.profile_steps)
        self._pending: dict[int, _PendingStep] = {}
        self._next_step: int | None = None
        self._newest = -1
        self._last_step: int | None = None
        self.finished = False
        self.stats = JobStats()

    def on_group_step(self, gs: GroupStep, now_ns: int) -> list[Output]:
        out: list[Output] = list(self.slow_ranks.observe(gs, now_ns))
        if self._next_step is not None and gs.step < self._next_step and self.stats.steps_released == 0:
            self._next_step = gs.step  # nothing released yet: an earlier step can still lead
        if self.finished or (self._next_step is not None and gs.step < self._next_step):
            self.stats.late_summaries += 1
            return out
        pending = self._pending.setdefault(gs.step, _PendingStep())
        pending.covered[gs.domain] = pending.covered.get(gs.domain, 0) + gs.size
        pending.step_ms = max(pending.step_ms, gs.step_ms)
        for name, value in gs.phase_max.items():
            pending.phase_max[name] = max(pending.phase_max.get(name, 0.0), value)
        self._newest = max(self._newest, gs.step)
        newest = self._group_newest.setdefault(gs.domain, {})
        newest[gs.group] = max(newest.get(gs.group, -1), gs.step)
        self._group_size.setdefault(gs.domain, {})[gs.group] = gs.size
        if self._next_step is None:
            self._next_step = gs.step
        out.extend(self._release(now_ns, world=gs.world))
        return out

    def on_job_event(self, event: JobEvent, now_ns: int) -> list[Output]:
        if event.phase == "end":
            self._last_step = event.last_step if event.last_step is not None else self._newest
            return self._maybe_finish(now_ns)
        return []

    def finish(self, now_ns: int) -> list[Output]:
        """Release everything pending and close open incidents."""
        out: list[Output] = []
        for step in sorted(self._pending):
            out.extend(self._emit_step(step, self._pending.pop(step), now_ns))
            self.stats.steps_incomplete += 1
        out.extend(self.slow_steps.close(now_ns))
        out.extend(self.slow_ranks.finish(now_ns))
        self.finished = True
        return out

    def _release(self, now_ns: int, world: int) -> list[Output]:
        out: list[Output] = []
        passed = self._progress(world) - self._lateness  # does not change while releasing
        while self._next_step is not None:
            step = self._next_step
            pending = self._pending.get(step)
            complete = pending is not None and max(pending.covered.values()) >= world
            overdue = step <= passed or self._newest - step >= self._max_open
            if not complete and not overdue:
                break
            if pending is not None:
                out.extend(self._emit_step(step, self._pending.pop(step), now_ns))
                if not complete:
                    self.stats.steps_incomplete += 1
            self._next_step = step + 1
        out.extend(self._maybe_finish(now_ns))
        return out

    def _progress(self, world: int) -> int:
        """The newest step every group has passed, over domains whose known groups cover the world."""
        best = -1
        for domain, sizes in self._group_size.items():
            if sum(sizes.values()) >= world:
                best = max(best, min(self._group_newest[domain].values()))
        return best

    def _emit_step(self, step: int, pending: _PendingStep, now_ns: int) -> list[Output]:
        self.stats.steps_released += 1
        out: list[Output] = list(self.slow_steps.observe(step, pending.step_ms, pending.phase_max, now_ns))
        out.extend(self.slow_ranks.advance(step, now_ns))
        return out

    def _maybe_finish(self, now_ns: int) -> list[Output]:
        if self.finished or self._last_step is None or self._next_step is None:
            return []
        if self._next_step > self._last_step:
            return self.finish(now_ns)
        return []


class FleetAnalysis:
    """All jobs a worker sees: routes summaries and lifecycle events to each job's analysis."""

    def __init__(self, cfg: DetectionConfig) -> None:
        self._cfg = cfg
        self.jobs: dict[str, JobAnalysis] = {}

    def job(self, job: str) -> JobAnalysis:
        analysis = self.jobs.get(job)
        if analysis is None:
            analysis = self.jobs[job] = JobAnalysis(job, self._cfg)
        return analysis

    def on_group_step(self, gs: GroupStep, now_ns: int) -> list[Output]:
        return self.job(gs.job).on_group_step(gs, now_ns)

    def on_job_event(self, event: JobEvent, now_ns: int) -> list[Output]:
        return self.job(event.job).on_job_event(event, now_ns)
