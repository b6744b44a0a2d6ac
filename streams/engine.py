"""The detection engine, pure: column chunks in, incidents and control commands out.

One `JobEngine` per job owns its step frames (windows), the scopes' and rules' state and its
incident book; `FleetEngine` routes chunks to jobs. No I/O and no clock inside: `now_ns` is
passed in, so a test (or a replay after a restart) feeds chunks and gets the same outputs.
The whole `FleetEngine.jobs[job]` object is the job's state snapshot (streams/state/).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from schemas import ControlCommand, Incident
from steplens.config import DetectionConfig
from streams.combine.chunks import StepColumns
from streams.incidents.book import IncidentBook
from streams.scopes import hung, pp_stage, slow_rank, slow_step
from streams.scopes.finding import Finding
from streams.signals import SignalState, device_findings, frame_findings
from streams.windows.step_frames import Frame, StepFrames, WindowParams

Output = Incident | ControlCommand
LAGGING_NS = 1_000_000_000  # the decode stage is this far behind its input: a backlog, hold timeouts


def explain_gc(findings: list[Finding], world: int) -> list[Finding]:
    """A slow step caused by GC is one problem with the ranks whose GC explains it.

    Few ranks with a T8 (R1) GC finding: the slow step joins their incident (a leaking
    process). Many ranks slow from GC at once (a GC storm): their slow-rank findings join the
    job's slow step instead of raising an incident per rank.
    """
    slow = next((f for f in findings if f.rule == "SLOW_STEP"), None)
    if slow is None or slow.cause_phase != "gc_ms":
        return findings
    gc_ranks = [f for f in findings if f.rule == "R1" and f.metric == "T8" and f.scope == "rank"]
    if gc_ranks and len(gc_ranks) <= max(1, world // 8):
        slow.key, slow.scope = gc_ranks[0].key, "rank"
        slow.ranks, slow.host = list(gc_ranks[0].ranks), gc_ranks[0].host
        return [f for f in findings if f is not slow] + [slow]  # the rank's rule stays the primary one
    for f in findings:
        gc_rank = f.rule == "R1" and f.metric == "T8"
        if (gc_rank or f.rule in ("SLOW_RANK", "R5")) and f.scope in ("rank", "link") \
                and f.cause_phase in ("gc_ms", None):
            f.key, f.scope, f.ranks, f.host = "job", "job", [], None
    return findings


@dataclass(slots=True)
class EngineStats:
    chunks: int = 0
    frames: int = 0
    late: int = 0
    rule_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class JobEngine:
    job: str
    cfg: DetectionConfig
    frames: StepFrames
    book: IncidentBook
    slow_step: slow_step.SlowStepState = field(default_factory=slow_step.SlowStepState)
    slow_rank: slow_rank.SlowRankState = field(default_factory=slow_rank.SlowRankState)
    stages: pp_stage.StageState = field(default_factory=pp_stage.StageState)
    signals: SignalState = field(default_factory=SignalState)
    last_step: int | None = None
    ended: bool = False
    finished: bool = False
    end_seen_ns: int = 0
    offsets: dict[int, int] = field(default_factory=dict)  # internal-topic partition -> last offset applied
    stats: EngineStats = field(default_factory=EngineStats)

    @classmethod
    def create(cls, job: str, cfg: DetectionConfig) -> JobEngine:
        params = WindowParams(timeout_factor=cfg.window_timeout_factor, timeout_min_s=cfg.window_timeout_min_s,
                              timeout_max_s=cfg.window_timeout_max_s, max_open_steps=cfg.window_max_open_steps)
        return cls(job=job, cfg=cfg, frames=StepFrames(params=params),
                   book=IncidentBook(job=job, profile_steps=cfg.profile_steps))

    def on_chunk(self, chunk: dict[str, Any], now_ns: int) -> list[Output]:
        self.stats.chunks += 1
        kind = chunk.get("kind")
        if self.finished:
            self.stats.late += 1
            return []
        behind = chunk.get("behind_ns")
        lag = chunk.get("lag")
        if isinstance(behind, int) and isinstance(lag, int):
            self.frames.input_lagging = behind > LAGGING_NS or lag > self.cfg.batch_max or bool(chunk.get("starved"))
        if kind == "steps":
            self.frames.add_steps(StepColumns(chunk), now_ns)
        elif kind == "kernels":
            self.frames.add_kernels(chunk["rows"], now_ns)
        elif kind == "device":
            return self._device(chunk, now_ns)
        elif kind == "job":
            if chunk["phase"] == "end":
                self.ended = True
                self.end_seen_ns = now_ns
                self.last_step = chunk.get("last_step")
            return self.tick(now_ns)
        return self.tick(now_ns)

    def tick(self, now_ns: int) -> list[Output]:
        """Release what is ready (complete, settled, timed out); finish an ended job."""
        if self.finished:
            return []
        force = self.ended and now_ns - self.end_seen_ns > self.frames.timeout_ns()
        out: list[Output] = []
        for frame in self.frames.release(now_ns, force=force):
            out.extend(self._evaluate(frame, now_ns))
        done = self.last_step is not None and self.frames.next_step is not None and (
            self.frames.next_step > self.last_step and not self.frames.frames)
        if self.ended and (done or force):
            out.extend(self.book.finish(now_ns))
            self.finished = True
        return out

    def _timed(self, name: str, start: float) -> None:
        self.stats.rule_seconds[name] = self.stats.rule_seconds.get(name, 0.0) + time.perf_counter() - start

    def _evaluate(self, frame: Frame, now_ns: int) -> list[Output]:
        self.stats.frames += 1
        findings: list[Finding] = []
        t = time.perf_counter()
        self.slow_step, found = slow_step.evaluate(frame, self.slow_step, self.cfg)
        findings.extend(found)
        self._timed("SLOW_STEP", t)
        t = time.perf_counter()
        self.slow_rank, found = slow_rank.evaluate(frame, self.frames.topo, self.slow_rank, self.cfg)
        findings.extend(found)
        self._timed("SLOW_RANK", t)
        t = time.perf_counter()
        self.stages, found = pp_stage.evaluate(frame, self.frames.topo, self.stages, self.cfg)
        findings.extend(found)
        self._timed("SLOW_STAGE", t)
        t = time.perf_counter()
        findings.extend(hung.evaluate(frame, self.frames.topo, self.frames.newest_of, self.cfg))
        self._timed("HUNG", t)
        findings.extend(frame_findings(frame, self.frames.topo, self.signals, self.cfg, self.stats.rule_seconds))
        findings = explain_gc(findings, int(frame.seen.sum()))
        for f in self.signals.pending:
            f.step = frame.step
        findings.extend(self.signals.pending)
        self.signals.pending.clear()
        return list(self.book.observe(frame.step, findings, now_ns, frame.seen))

    def _device(self, chunk: dict[str, Any], now_ns: int) -> list[Output]:
        # device findings join the next released step's findings (one book cadence: steps)
        self.signals.pending.extend(device_findings(chunk, self.signals, self.cfg, self.stats.rule_seconds))
        del self.signals.pending[:-1000]
        return []


@dataclass(slots=True)
class FleetEngine:
    """Every job this worker owns."""

    cfg: DetectionConfig
    jobs: dict[str, JobEngine] = field(default_factory=dict)

    def job(self, job: str) -> JobEngine:
        engine = self.jobs.get(job)
        if engine is None:
            engine = self.jobs[job] = JobEngine.create(job, self.cfg)
        return engine

    def on_chunk(self, chunk: dict[str, Any], now_ns: int) -> list[Output]:
        job = chunk.get("job")
        if not isinstance(job, str) or not job:
            return []  # device samples nobody attributed to a job: landed, not analysed
        return self.job(job).on_chunk(chunk, now_ns)

    def tick(self, now_ns: int) -> list[Output]:
        out: list[Output] = []
        for engine in list(self.jobs.values()):
            out.extend(engine.tick(now_ns))
        return out

    def open_windows(self) -> int:
        return sum(len(e.frames.frames) for e in self.jobs.values())

    def open_incidents(self) -> int:
        return sum(e.book.open_incidents() for e in self.jobs.values())
