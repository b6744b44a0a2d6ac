"""Slow rank: the rank its communication groups keep waiting for (Hermes §3).

Each GroupStep already says whether its slowest rank stood out (wait ratio and robust
z-score, see windows/domain_window.py). A rank becomes an incident after it was flagged
in `min_steps` steps with no gap longer than `resolve_after` steps, in any of its
comparable domains; evidence from every domain that flagged it is merged into one
incident per rank. Opening an incident also asks that rank for detailed profiling
(coarse-to-fine), via a ControlCommand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import ControlCommand, Incident
from streams.analysis.advisor import advise
from streams.records import GroupStep

UPDATE_EVERY_STEPS = 50


@dataclass(slots=True)
class _RankRun:
    rank: int
    host: str
    first: int
    last: int
    steps: set[int] = field(default_factory=set)
    domains: dict[str, int] = field(default_factory=dict)
    peak_wait: float = 0.0
    peak_z: float = 0.0
    busy_ms: float = 0.0
    median_ms: float = 0.0
    phases: dict[str, int] = field(default_factory=dict)
    opened: bool = False
    last_update_count: int = 0


class SlowRankDetector:
    """Per-job detector over GroupStep summaries (any domain, any order within a step)."""

    def __init__(self, job: str, min_steps: int, resolve_after: int, profile_steps: int) -> None:
        self.job = job
        self._min_steps = min_steps
        self._resolve_after = resolve_after
        self._profile_steps = profile_steps
        self._runs: dict[int, _RankRun] = {}
        self.flagged_ranks: set[int] = set()

    def observe(self, gs: GroupStep, now_ns: int) -> list[Incident | ControlCommand]:
        if not gs.flagged:
            return []
        run = self._runs.get(gs.slowest_rank)
        if run is None or gs.step > run.last + self._resolve_after:
            run = self._runs[gs.slowest_rank] = _RankRun(gs.slowest_rank, gs.slowest_host, gs.step, gs.step)
        run.first = min(run.first, gs.step)
        run.last = max(run.last, gs.step)
        run.steps.add(gs.step)
        run.domains[gs.domain] = run.domains.get(gs.domain, 0) + 1
        if gs.wait_ratio >= run.peak_wait:
            run.peak_wait, run.busy_ms, run.median_ms = gs.wait_ratio, gs.busy_max_ms, gs.busy_median_ms
        run.peak_z = max(run.peak_z, gs.slowest_z)
        if gs.slowest_excess_phase:
            run.phases[gs.slowest_excess_phase] = run.phases.get(gs.slowest_excess_phase, 0) + 1
        out: list[Incident | ControlCommand] = []
        count = len(run.steps)
        if not run.opened and count >= self._min_steps:
            run.opened = True
            run.last_update_count = count
            self.flagged_ranks.add(run.rank)
            incident = self._incident(run, "open", now_ns)
            out.append(incident)
            out.append(ControlCommand(
                command_id=f"profile:{incident.incident_id}",
                job=self.job, action="profile_on", ranks=[run.rank],
                step_first=gs.step + 1, step_count=self._profile_steps, issued_ns=now_ns,
                reason=f"slow rank {run.rank}: {incident.summary}", incident_id=incident.incident_id,
            ))
        elif run.opened and count - run.last_update_count >= UPDATE_EVERY_STEPS:
            run.last_update_count = count
            out.append(self._incident(run, "update", now_ns))
        return out

    def advance(self, step: int, now_ns: int) -> list[Incident]:
        """The job reached `step`: resolve runs not flagged for `resolve_after` steps."""
        out: list[Incident] = []
        for rank, run in list(self._runs.items()):
            if step - run.last > self._resolve_after:
                if run.opened:
                    out.append(self._incident(run, "resolved", now_ns))
                del self._runs[rank]
        return out

    def finish(self, now_ns: int) -> list[Incident]:
        """The job ended: close every open incident with its final step range."""
        out = [self._incident(run, "resolved", now_ns) for run in self._runs.values() if run.opened]
        self._runs.clear()
        return out

    def _incident(self, run: _RankRun, state: str, now_ns: int) -> Incident:
        phase = max(run.phases, key=lambda k: run.phases[k]) if run.phases else None
        advice = advise(phase)
        domains = ", ".join(f"{d.upper()}" for d in sorted(run.domains))
        return Incident(
            incident_id=f"SLOW_RANK:{self.job}:r{run.rank}:s{run.first}",
            job=self.job, rule="SLOW_RANK", state=state,  # type: ignore[arg-type]
            severity="critical" if run.peak_wait > 0.2 else "warning", scope="rank",
            summary=(
                f"rank {run.rank} ({run.host}) is the one its {domains} groups wait for: busy "
                f"{run.busy_ms:.0f} ms vs group median {run.median_ms:.0f} ms, R_wait {run.peak_wait:.2f}, "
                f"in {len(run.steps)} steps {run.first}–{run.last}"
            ),
            detected_ns=now_ns, ranks=[run.rank], host=run.host,
            step_first=run.first, step_last=run.last,
            observed=run.busy_ms, expected=run.median_ms, unit="ms",
            evidence={
                "wait_ratio": run.peak_wait, "robust_z": run.peak_z, "flagged_steps": float(len(run.steps)),
                **{f"flagged_in_{d}": float(n) for d, n in sorted(run.domains.items())},
            },
            cause=advice.cause, suggestion=advice.suggestion,
        )
