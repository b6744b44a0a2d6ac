"""The detection engine, pure: column chunks in, incidents and control commands out.

One `JobEngine` per job owns its step frames (windows), the scopes' and rules' state and its
incident book; `FleetEngine` routes chunks to jobs. No I/O and no clock inside: `now_ns` is
passed in, so a test (or a replay after a restart) feeds chunks and gets the same outputs.
The whole `FleetEngine.jobs[job]` object is the job's state snapshot (streams/detect/state/).

Job attempts (contract 1.4): a relaunch of a job under the same id (a higher `attempt` on its
`start` or steps) replaces the job's engine with a fresh one, so the steps it re-runs from its
checkpoint are analysed and the world it starts with (fewer hosts after an eviction) is the
only one hangs are judged on. The replaced attempt takes its own late reports until the decode
stage is current, then is judged as at its end and its open incidents are resolved with
`evidence.attempt_ended`; reports of an attempt older than that are counted late.
A job silent `job_silence_s` (no rank, no device, no `end`) has stopped: one JOB_STOPPED incident,
judged by the worker's clock while the input is current, and by the job's own clock when a
relaunch replaces it (the relaunch's first timed report `job_silence_s` or more after the old
attempt's last report: the crash is raised then, even if a backlog hid the silence from the
worker's clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar, cast

import numpy as np

from schemas import ControlCommand, Incident
from schemas.columns import DOMAINS
from streams.detect.combine.chunks import (
    Chunk,
    DeviceChunk,
    IntArray,
    JobChunk,
    StepColumns,
    is_device,
    is_job,
    is_kernels,
    is_steps,
)
from streams.detect.config import DetectionConfig
from streams.detect.incidents.book import IncidentBook
from streams.detect.incidents.join import CULPRIT_RULES, JoinState, OpenTrack, join
from streams.detect.scopes import (
    expected,
    group_split,
    hung,
    memory,
    pp_stage,
    rhythm,
    slow_link,
    slow_pair,
    slow_rank,
    slow_step,
    stall,
)
from streams.detect.scopes.finding import Finding
from streams.detect.scopes.stopped import job_stopped
from streams.detect.signals import (
    DeviceParams,
    KernelParams,
    SignalState,
    StepParams,
    device_findings,
    device_ticks,
    follow_slow_step,
    frame_findings,
    name_slow_groups,
)
from streams.detect.windows.step_frames import Frame, ReportedLayout, StepFrames, WindowParams
from streams.model.memory import expected_peak_bytes, from_contract
from streams.model.reference import ReferenceModels

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Output = Incident | ControlCommand
LAGGING_NS = 1_000_000_000  # the decode stage is this far behind its input: a backlog, hold timeouts
LAG_STALE_NS = 5_000_000_000  # no chunk for this long (engine idle) ...
QUIET_TICKS = 3  # ... and for this many ticks: the decode stage has nothing queued
# finished jobs a fleet remembers after letting their state go (oldest forgotten first): ~100 bytes each
FINISHED_JOBS_KEPT = 10_000
# the rules that judge the step kinds of a job's periodic work (step time, throughput, inter-step CPU): quiet at
# job scope on a step the slow-step scope's rhythm calls planned
PLANNED_WORK_RULES = ("SLOW_STEP", "R3", "R10")
# a job found below the fleet waits at most this many frames after its verdict while other running jobs are still
# being judged: jobs of one rollout reach their verdicts a few frames apart, and the first ones must not open
# incidents of their own before the fleet sees the drift (verdict at ~15 frames + 8 < the 30-step bar)
DRIFT_WAIT_FRAMES = 8
# ... and at most this many while one of those jobs is behind its verdict on the job clock: records of jobs that
# ran together reach the engine apart in a backlog (one job's partitions read ahead), and the peers' verdicts are
# still to come (a wait only a backlog makes)
DRIFT_LAG_WAIT_FRAMES = 24
DRIFT_RESOLVE_TICKS = 100  # ticks (~0.1-1 s each) without a fleet-wide drift before its incident resolves
# a job waiting for the fleet's models (being judged, past its warm-up) has them refitted every this many of its
# frames, not only every `expected_refit_s`: on a fleet that just started (a fresh worker, the first jobs of a
# kind) a 60-s cadence let every job pass `expected_decide_by` before any model existed, and none was judged
WAITING_REFIT_FRAMES = 4
# ... while refitting takes at most this share of the worker's time (a fleet of thousands of jobs: its models
# exist, and the `expected_refit_s` cadence keeps them current)
WAITING_REFIT_SHARE = 0.05


def input_lagging(chunk: Chunk, batch_max: int, now_ns: int) -> bool | None:
    """Whether `chunk` comes from a backlog (None: not said): the decode stage was behind its input
    when it made the chunk, or the engine is behind the decode stage (the chunk waited over
    LAGGING_NS on the internal topic: while a slow batch is evaluated, the next reports queue)."""
    behind = chunk.get("behind_ns")
    lag = chunk.get("lag")
    if not (isinstance(behind, int) and isinstance(lag, int)):
        return None
    decoded = chunk.get("decoded_ns")
    queued = now_ns - decoded if isinstance(decoded, int) and decoded > 0 else 0
    return behind > LAGGING_NS or queued > LAGGING_NS or lag > batch_max or bool(chunk.get("starved"))


S = TypeVar("S")
P = TypeVar("P", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class StatefulScope(Generic[S, P]):
    """A scope judged on each released frame with the job's topology and state of its own:
    `evaluate(frame, topo, state, params) -> (state, findings)`. Its state stays a field of the
    JobEngine (`state` names it), so a snapshot keeps each scope's state under its own name."""

    label: str  # its time counts under this name in EngineStats.rule_seconds
    state: str
    evaluate: Callable[[Frame, ReportedLayout, S, P], tuple[S, list[Finding]]]
    params: type[P]

    def run(self, engine: JobEngine, frame: Frame) -> list[Finding]:
        state, found = self.evaluate(frame, engine.frames.topo, getattr(engine, self.state),
                                     engine.cfg.params(self.params))
        setattr(engine, self.state, state)
        return found


@dataclass(frozen=True, slots=True)
class StatelessScope(Generic[P]):
    """A scope judged on each released frame from the frame and the job's topology alone:
    `evaluate(frame, topo, params) -> findings`."""

    label: str
    evaluate: Callable[[Frame, ReportedLayout, P], list[Finding]]
    params: type[P]

    def run(self, engine: JobEngine, frame: Frame) -> list[Finding]:
        return self.evaluate(frame, engine.frames.topo, engine.cfg.params(self.params))


# The scopes that share a shape, in the order their findings go to the join: who is slow in a frame
# against whom. Two frame scopes stay outside the list as their calls differ: the slow-step scope runs
# first and sees no topology (its verdict, slow or not, decides what R3 may say), and the hung scope
# reads when each rank last reported and the worker's clock. The stall scope is judged between
# frames (past the last step), JOB_STOPPED by the job's silence. Left unannotated: mypy then checks each
# entry's evaluate against its state and Params.
FRAME_SCOPES = (
    StatefulScope("SLOW_RANK", "slow_rank", slow_rank.evaluate, slow_rank.Params),
    StatefulScope("SLOW_RANK", "pairs", slow_pair.evaluate, slow_pair.Params),
    StatefulScope("SLOW_STAGE", "stages", pp_stage.evaluate, pp_stage.Params),
    StatelessScope("SLOW_GROUP", group_split.evaluate, group_split.Params),
    StatefulScope("SLOW_LINK", "links", slow_link.evaluate, slow_link.Params),
)


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
    pairs: slow_pair.PairState = field(default_factory=slow_pair.PairState)
    stages: pp_stage.StageState = field(default_factory=pp_stage.StageState)
    signals: SignalState = field(default_factory=SignalState)
    stall: stall.StallState = field(default_factory=stall.StallState)
    links: slow_link.LinkState = field(default_factory=slow_link.LinkState)
    joins: JoinState = field(default_factory=JoinState)
    last_step: int | None = None
    ended: bool = False
    finished: bool = False
    end_seen_ns: int = 0
    end_ts_ns: int = 0  # the job's own clock at its end event
    offsets: dict[int, int] = field(default_factory=dict)  # internal-topic partition -> last offset applied
    stats: EngineStats = field(default_factory=EngineStats)
    attempt: int = 0  # the job's launch this state is for (contract 1.4)
    heard_ns: int = 0  # worker clock of the job's newest report (steps, summaries, device samples)
    stopped: bool = False  # JOB_STOPPED raised for the current silence
    last_step_ts_ns: int = 0  # the job's clock at the end of its newest step report (this attempt's alone)
    previous: JobEngine | None = None  # the attempt this relaunch replaced, until its reports are all in
    launch_ts_ns: int = 0  # the job's clock at this attempt's first `start` or step (0: none yet)
    expected: expected.ExpectedState = field(default_factory=expected.ExpectedState)  # below the fleet (issue #44)
    device_kind: str = ""  # the job's devices' kind, from their samples ("": not said)
    reference: ReferenceModels | None = None  # the fleet's reference models, set by the FleetEngine
    drift: frozenset[str] = frozenset()  # classes under a fleet-wide drift incident (set by the FleetEngine)
    peers_undecided: bool = False  # other running jobs still being judged against the fleet (set by the FleetEngine)
    peers_behind: bool = False  # ... one of them behind this job's first below verdict on its clock (the same)
    below_ts_ns: int = 0  # the job's clock at its first below verdict (0: none)
    # the job's clock at the end of its newest judged step: how far the fleet has judged it. Not its newest report:
    # in a backlog one partition of its ranks reads ahead, and a step is judged once every rank's report is in
    judged_ts_ns: int = 0
    start_ts_ns: int = 0  # the job's clock at this attempt's `start` record (0: none seen)
    start_seen_ns: int = 0  # the worker's clock when that record came in
    memory: memory.MemoryState = field(default_factory=memory.MemoryState)  # step memory, OOM (contract 1.5)

    @classmethod
    def create(cls, job: str, cfg: DetectionConfig, attempt: int = 0) -> JobEngine:
        params = WindowParams(timeout_factor=cfg.window_timeout_factor, timeout_min_s=cfg.window_timeout_min_s,
                              timeout_max_s=cfg.window_timeout_max_s, max_open_steps=cfg.window_max_open_steps)
        return cls(job=job, cfg=cfg, frames=StepFrames(params=params), attempt=attempt,
                   book=IncidentBook(job=job, profile_steps=cfg.profile_steps,
                                     hold_down_steps=cfg.incident_hold_down_steps,
                                     culprit_hold_down_steps=cfg.culprit_hold_down_steps,
                                     shift_hold_steps=cfg.baseline_steps, attempt=attempt))

    def relaunched(self, attempt: int) -> JobEngine:
        """A fresh engine for the job's new `attempt`; this one stays its `previous` until the
        decode stage is current (`close_previous`): under a backlog the relaunch's `start`, on the
        jobs topic, overtakes this attempt's last steps and device samples, still queued on theirs,
        and they must be judged here (its hang, where it stopped)."""
        fresh = JobEngine.create(self.job, self.cfg, attempt)
        fresh.offsets, fresh.stats = self.offsets, self.stats  # one input, one count, across attempts
        if not self.finished:
            fresh.previous = self
            self.previous = None  # one attempt back is all a relaunch needs
        return fresh

    def close_previous(self, ts_ns: int, now_ns: int) -> list[Output]:
        """The attempt this one replaced, once its reports are all in: its last frames released and
        its stall judged as at an end (a hang before the crash: HUNG_HOST/HUNG_RANK), JOB_STOPPED if
        it stopped without an `end` and the job's clock ran `job_silence_s` or more from its newest
        step or device sample to `ts_ns` (this attempt's first timed report), unless already raised;
        then its open incidents resolved (`attempt_ended`)."""
        prev, self.previous = self.previous, None
        if prev is None:
            return []
        out: list[Output] = []
        crashed = not prev.ended
        # device samples carry no attempt: the relaunch's own, read before its `start` or steps, went to the
        # old attempt (a backlog reads topics apart); it is judged on those taken before the relaunch's start,
        # or, when it no longer has them apart (`StallState.cut`), its stall is not judged
        newest_dev = int(prev.stall.newest_dev_ns.max(initial=0))
        mixed = newest_dev >= ts_ns
        if mixed and (before := prev.stall.cut(ts_ns)) is not None:  # its own samples, those before the relaunch
            prev.stall, mixed = before, False
            newest_dev = int(before.newest_dev_ns.max(initial=0))
        if crashed:
            out.extend(prev.drain(now_ns, judge_stall=not mixed))
        last_ns = prev.last_step_ts_ns if mixed else max(prev.last_step_ts_ns, newest_dev)  # a hang's samples count
        gap_s = (ts_ns - last_ns) / 1e9
        if (crashed and not prev.stopped and prev.last_step_ts_ns > 0 and prev.frames.next_step is not None
                and gap_s >= self.cfg.job_silence_s):
            prev.stopped = True
            out.extend(prev.book.stopped(prev.frames.next_step, job_stopped(prev.frames.next_step, gap_s), now_ns))
        out.extend(prev.book.finish(now_ns, attempt_ended=True))
        return out

    def on_chunk(self, chunk: Chunk, now_ns: int, lagging: bool | None = None) -> list[Output]:
        """Apply one chunk; `lagging`: what it says of the decode stage's input (`input_lagging`,
        computed once by the fleet), None when it says nothing."""
        self.stats.chunks += 1
        if self.finished:
            self.stats.late += 1
            return []
        if lagging is not None:
            self.frames.input_lagging = lagging
        out: list[Output] = []
        if self.previous is not None and not self.launch_ts_ns:
            self.launch_ts_ns = _first_ts(chunk)
        if self.previous is not None and self.launch_ts_ns and not self.frames.input_lagging:
            out.extend(self.close_previous(self.launch_ts_ns, now_ns))
        if is_steps(chunk) or is_kernels(chunk) or is_device(chunk):
            self.heard_ns, self.stopped = now_ns, False
        if is_steps(chunk):
            cols = StepColumns(chunk)
            self.last_step_ts_ns = max(self.last_step_ts_ns, int(np.max(cols.end_ns, initial=0)))
            self.frames.add_steps(cols, now_ns)
            self.stall.on_steps(cols.end_ns)
        elif is_kernels(chunk):
            self.frames.add_kernels(chunk, now_ns)
        elif is_device(chunk):
            return out + self._device(chunk, now_ns)
        elif is_job(chunk):
            if chunk["phase"] == "start":
                self.start_ts_ns, self.start_seen_ns = int(chunk.get("ts_ns") or 0), now_ns
                self.frames.summaries_declared = chunk.get("kernel_summaries") is True
                self._expect_memory(chunk)
            elif chunk["phase"] == "end":
                self.ended = True
                self.end_seen_ns = now_ns
                self.end_ts_ns = int(chunk.get("ts_ns") or 0)
                self.last_step = chunk.get("last_step")
        return out + self.tick(now_ns)

    def _expect_memory(self, chunk: JobChunk) -> None:
        """What the declared model should take per rank (seed 004's formulas): the OOM incident's yardstick."""
        shape = chunk.get("model_shape")
        got = from_contract(shape, chunk.get("parallel") or {}) if shape else None
        if got is None:
            return
        estimate = expected_peak_bytes(*got)
        state = getattr(self, "memory", None) or memory.MemoryState()
        state.expected_bytes, state.expected_dominant = estimate.total, estimate.dominant
        self.memory = state

    def tick(self, now_ns: int) -> list[Output]:
        """Release what is ready (complete, settled, timed out); finish an ended job. With the input
        current, the attempt this one replaced is closed first (or, before any timed report of this
        one, goes on ticking)."""
        out: list[Output] = []
        prev = self.previous
        if prev is not None and not self.frames.input_lagging:
            if self.launch_ts_ns or self.ended:
                out = self.close_previous(self.launch_ts_ns or self.end_ts_ns, now_ns)
            else:
                prev.frames.input_lagging = False
                out = prev.tick(now_ns)
                if prev.finished:
                    self.previous = None
        return out + self._tick(now_ns)

    def _tick(self, now_ns: int) -> list[Output]:
        if self.finished:
            return []
        if self.ended and self.frames.input_lagging and self.frames.frames:
            self.end_seen_ns = now_ns  # the job's last reports are still in the backlog: the end waits for them
        force = self.ended and now_ns - self.end_seen_ns > self.frames.timeout_ns()
        out: list[Output] = []
        for frame in self.frames.release(now_ns, force=force):
            out.extend(self._evaluate(frame, now_ns))
        done = self.last_step is not None and self.frames.next_step is not None and (
            self.frames.next_step > self.last_step and not self.frames.frames)
        if not self.frames.frames and self.frames.next_step is not None and (done or not self.ended):
            # a stall is judged on all steps released (at the end: every step the job completed)
            lagging = self.frames.input_lagging and not done
            found = stall.evaluate(self.stall, self.frames.topo, self.frames.next_step, self.frames.timeout_ns(),
                                   self.cfg.params(stall.Params), lagging, now_ns, done)
            if found:
                out.extend(self.book.observe(self.frames.next_step, found, now_ns))
        if self.ended and done and not force and self._stall_samples_in_flight():
            return out  # the job ended stalled: wait (a window timeout at most) for its device samples
        if self.ended and (done or force) and self.previous is not None:
            return out  # the attempt it replaced may still have reports in the backlog: it goes first (`tick`)
        if self.ended and (done or force):
            out.extend(self.book.finish(now_ns))
            self.finished = True
        elif self._silent(now_ns) and self.frames.next_step is not None:
            self.stopped = True
            silent_s = (now_ns - self.heard_ns) / 1e9
            # every report is in (the job is silent): who stopped first, if its devices said so before the
            # kill (a rank's idle while its peers spun in the collective, a host's silent before the others)
            found = stall.evaluate(self.stall, self.frames.topo, self.frames.next_step, self.frames.timeout_ns(),
                                   self.cfg.params(stall.Params), False, now_ns, True, stopped=True)
            if found:
                out.extend(self.book.observe(self.frames.next_step, found, now_ns))
            out.extend(self.book.stopped(self.frames.next_step, job_stopped(self.frames.next_step, silent_s), now_ns))
        return out

    def drain(self, now_ns: int, judge_stall: bool = True) -> list[Output]:
        """Every report of this attempt judged as at its end (it was replaced, all its reports are in):
        the open frames released and, with `judge_stall`, the stall past its last step evaluated (a
        hang before the crash); its incidents stay open for the caller to resolve."""
        out: list[Output] = []
        self.frames.input_lagging = False
        for frame in self.frames.release(now_ns, force=True):
            out.extend(self._evaluate(frame, now_ns))
        if judge_stall and self.frames.next_step is not None and not self.frames.frames:
            found = stall.evaluate(self.stall, self.frames.topo, self.frames.next_step, self.frames.timeout_ns(),
                                   self.cfg.params(stall.Params), False, now_ns, True)
            if found:
                out.extend(self.book.observe(self.frames.next_step, found, now_ns))
        return out

    def _silent(self, now_ns: int) -> bool:
        """Every rank and device of the job stopped reporting, without an `end` (a crash, a killed
        job): silent `job_silence_s` by the worker's clock, while the decode stage is current (a
        backlog delays reports, it does not stop them) and no step is still waiting for reports."""
        return (not self.ended and not self.stopped and self.heard_ns > 0 and not self.frames.input_lagging
                and not self.frames.frames and now_ns - self.heard_ns >= int(self.cfg.job_silence_s * 1e9))

    def _stall_samples_in_flight(self) -> bool:
        """The end event says the job's clock ran well past its last completed step (a stall), but
        the device samples of that stretch, on their own topic, have not all arrived yet."""
        st = self.stall
        if st.reported_for == st.last_end_ns or st.last_end_ns == 0 or not self.end_ts_ns:
            return False
        threshold = self.cfg.hang_stall_factor * self.frames.timeout_ns()
        newest = int(st.newest_dev_ns.max(initial=0))
        return self.end_ts_ns - st.last_end_ns >= threshold and newest < self.end_ts_ns - threshold // 2

    def _timed(self, name: str, start: float) -> None:
        self.stats.rule_seconds[name] = self.stats.rule_seconds.get(name, 0.0) + time.perf_counter() - start

    def _evaluate(self, frame: Frame, now_ns: int) -> list[Output]:
        self.stats.frames += 1
        ends = frame.end_ns[frame.seen]
        if ends.size:
            self.judged_ts_ns = max(getattr(self, "judged_ts_ns", 0), int(ends.max()))
        findings: list[Finding] = []
        t = time.perf_counter()
        self.slow_step, found = slow_step.evaluate(frame, self.slow_step, self.cfg.params(slow_step.Params))
        slow_now = bool(found)
        findings.extend(found)
        self._timed("SLOW_STEP", t)
        for scope in FRAME_SCOPES:
            t = time.perf_counter()
            findings.extend(scope.run(self, frame))
            self._timed(scope.label, t)
        t = time.perf_counter()
        findings.extend(hung.evaluate(frame, self.frames.topo, self.frames.newest_of, self.frames.heard_ns, now_ns,
                                     self.cfg.params(hung.Params)))
        self._timed("HUNG", t)
        step_rules = frame_findings(frame, self.frames.topo, self.signals, self.cfg.params(StepParams),
                                    self.cfg.params(KernelParams), self.stats.rule_seconds)
        culprit_now = any(f.rule in CULPRIT_RULES for f in findings)
        if not slow_now and not culprit_now:  # the slow-step scope owns step time: R3 on a step it did not find
            # slow (within a jittery job's noise, or a one-off step of healthy training's kinds) marks no slowdown's
            # onset; beside a slow rank, host or stage flagged now it is that culprit's toll on the job's throughput
            # (a slowdown too small for the slow-step scope's robust sigmas), and the join gives it to the culprit
            step_rules = [f for f in step_rules if not (f.rule == "R3" and f.metric == "step_throughput")]
        findings.extend(step_rules)
        findings.extend(self._device_findings_until(frame))
        findings = join(findings, int(frame.seen.sum()), self._tracks(), frame.step, self._members,
                        len(self.slow_step.history), self.joins,
                        frozenset(t.finding.key for t in self.book.held.values() if t.finding.family == "perf"))
        findings = name_slow_groups(follow_slow_step(findings))
        if self.slow_step.planned:  # the job's periodic work (scopes/rhythm.py): its step kinds' rules stay quiet
            findings = [f for f in findings if not (f.key == "job" and f.rule in PLANNED_WORK_RULES)]
        if not slow_now:  # R3 on step throughput that no culprit took: no slowdown's onset (above)
            findings = [f for f in findings
                        if not (f.rule == "R3" and f.metric == "step_throughput" and f.key == "job")]
        findings.extend(self._below_expected(frame))
        findings = self._step_memory(frame, findings)
        return self._with_checkpoints(self.book.observe(frame.step, findings, now_ns, frame.seen))

    def _with_checkpoints(self, out: list[Output]) -> list[Output]:
        """The job's checkpoint period, where its rhythm shows one, on the incidents it sends (evidence
        `checkpoint_every_steps` and `baseline_step_ms`): what a relaunch would lose, for the mitigation
        worker (streams/mitigate/book.py), which otherwise assumes a period (a setting)."""
        if not any(isinstance(o, Incident) for o in out):
            return out
        every = rhythm.checkpoint_every(self.slow_step.rhythm, self.cfg.rhythm_min_period)
        if not every or not self.slow_step.history:
            return out
        figures = {"checkpoint_every_steps": float(every),
                   "baseline_step_ms": round(float(np.median(self.slow_step.history)), 3)}
        return [replace(o, evidence={**o.evidence, **figures}) if isinstance(o, Incident) and o.state != "resolved"
                else o for o in out]

    def _step_memory(self, frame: Frame, findings: list[Finding]) -> list[Finding]:
        """The OOM forecast from the steps' own allocator statistics (scopes/memory.py), after the join (a
        device's memory is no culprit of a slow step). A rank that sends them is judged by them: its
        device's forecast from `mem_pct` (a coarser view of the same memory) is dropped, one incident."""
        t = time.perf_counter()
        state = getattr(self, "memory", None)  # a snapshot from before the scope existed has none
        if state is None:
            state = self.memory = memory.MemoryState()
        self.memory, found = memory.evaluate(frame, self.frames.topo, state, self.cfg.params(memory.Params))
        self._timed("OOM", t)
        reporting = self.memory.reporting
        if reporting.any():
            findings = [f for f in findings if not (f.rule == "OOM" and f.metric == "T6" and f.ranks and all(
                r < reporting.size and reporting[r] for r in f.ranks))]
        return findings + found

    def _below_expected(self, frame: Frame) -> list[Finding]:
        """The job against the fleet's reference models (scopes/expected.py), after the join: a job slow
        from its start has no culprit to join, and a culprit's incident is no reason to judge it."""
        t = time.perf_counter()
        state = getattr(self, "expected", None)  # a snapshot from before the scope existed has none
        if state is None:
            state = self.expected = expected.ExpectedState()
        self.expected, found = expected.evaluate(frame, self.frames.topo, state, self.cfg.params(expected.Params),
                                                 getattr(self, "reference", None), getattr(self, "device_kind", ""))
        self._timed("BELOW_EXPECTED", t)
        drifting: frozenset[str] = getattr(self, "drift", frozenset())
        if found and not set(state.below) <= set(getattr(state, "reviewed", state.below)):
            return []  # a verdict the fleet has not weighed yet (its next tick): one of many jobs drifting?
        if found and expected.classes(state, getattr(self, "device_kind", ""))[1] <= drifting:
            return []  # the fleet's drift, not this job's: the fleet's incident lists it
        waited = state.frames - (getattr(state, "below_frame", 0) or state.frames)
        if state.below and not getattr(self, "below_ts_ns", 0):
            self.below_ts_ns = getattr(self, "judged_ts_ns", 0)  # a snapshot from before the field has none
        wait = DRIFT_LAG_WAIT_FRAMES if getattr(self, "peers_behind", False) else DRIFT_WAIT_FRAMES
        if found and getattr(self, "peers_undecided", False) and waited < wait:
            return []  # jobs still being judged may be below too: a drift of the fleet is the fleet's incident
        return found

    def _tracks(self) -> list[OpenTrack]:
        # `first`: the step the current episode began at (a culprit back for another burst is as young as the burst)
        return [OpenTrack(t.finding.key, t.finding.scope, t.finding.cause_phase,
                          t.first if t.revived_at is None else t.revived_at, t.opened, tuple(t.finding.ranks),
                          tuple(t.rules))
                for t in self.book.tracks.values() if t.finding.family == "perf"]

    def _members(self, domain: str, group: int) -> set[int]:
        topo = self.frames.topo
        if domain not in DOMAINS:
            return set()
        return set(np.flatnonzero(topo.groups[DOMAINS.index(domain)] == group).tolist())

    def _device(self, chunk: DeviceChunk, now_ns: int) -> list[Output]:
        # device findings wait for the step of their samples' time (one book cadence: steps)
        kind = chunk.get("device_kind")
        if isinstance(kind, str) and kind:
            self.device_kind = kind
        self.stall.on_device(np.asarray(chunk["rank"], dtype=np.int64), np.asarray(chunk["ts_ns"], dtype=np.int64),
                             np.asarray(chunk["aicore_pct"], dtype=np.float64))
        pending = self.signals.pending
        ticks = device_ticks(chunk, self.signals)
        if ticks:  # the device feed's Params once per chunk that releases ticks
            params = self.cfg.params(DeviceParams)
            for tick in ticks:
                taken_ns = int(_stamps(tick).max(initial=0))
                pending.extend((taken_ns, f) for f in device_findings(tick, self.signals, params,
                                                                      self.stats.rule_seconds,
                                                                      self.frames.topo.stage, self._clock()))
        del pending[:-1000]
        return []

    def _clock(self) -> tuple[int, int, float]:
        """The job's newest step, its end (ns, the job's clock; 0: none yet) and its recent step time in seconds
        (0: none yet): what the OOM forecast tells its steps by."""
        recent = self.frames.recent_ms
        return (int(self.frames.newest_of.max(initial=-1)), self.stall.last_end_ns,
                float(np.median(recent)) / 1e3 if recent else 0.0)

    def _device_findings_until(self, frame: Frame) -> list[Finding]:
        """Device findings whose samples were taken by the end of this step, stamped with it.

        Device samples travel on their own topic and may run ahead of the steps (a backlog on
        the step topic, a worker catching up): a finding from a sample taken after this step
        ended waits for the frame of its own time, so a fault is never dated before its onset.
        Samples that arrive behind the steps join the step being evaluated (the earliest still open),
        dated by their own time (`since_step`): a device's last samples of a fault, released after the
        fault's incident resolved, are that incident's evidence, not a new incident (incidents/book.py).
        The date counts back in the longest recent step, so it is never earlier than the sample.
        """
        if not self.signals.pending:
            return []
        end = int(frame.end_ns[frame.seen].max(initial=0))
        starts = frame.start_ns[frame.seen]
        start = int(starts[starts > 0].min()) if np.any(starts > 0) else 0
        longest_ns = max([end - start, *(round(ms * 1e6) for ms in self.frames.recent_ms)])
        take: list[Finding] = []
        keep: list[tuple[int, Finding]] = []
        for taken_ns, f in self.signals.pending:
            if end == 0 or taken_ns <= end:
                f.step = frame.step
                if 0 < start < end and taken_ns < start:  # behind the steps
                    f.since_step = frame.step - max(1, -(-(start - taken_ns) // longest_ns))
                take.append(f)
            else:
                keep.append((taken_ns, f))
        self.signals.pending = keep
        return take


def _stamps(chunk: DeviceChunk) -> IntArray:
    """A device chunk's sample times as int64 (a list from JSON, an array from a binary frame; none: empty)."""
    stamps = chunk.get("ts_ns")
    return np.asarray([] if stamps is None else stamps, dtype=np.int64)


def _split_device(chunk: DeviceChunk, before_ns: int) -> tuple[DeviceChunk | None, DeviceChunk | None]:
    """A device chunk cut at `before_ns` (the relaunch's start on the job's clock): the samples taken
    before it belong to the replaced attempt (they carry no attempt of their own)."""
    ts = _stamps(chunk)
    early = ts < before_ns
    if not early.any():
        return None, chunk
    if early.all():
        return chunk, None
    parts: list[DeviceChunk] = []
    for mask in (early, ~early):
        idx = np.flatnonzero(mask).tolist()
        parts.append(cast(DeviceChunk, {k: ([v[i] for i in idx] if isinstance(v, list) and len(v) == ts.size
                                            else v[mask] if isinstance(v, np.ndarray) and v.size == ts.size else v)
                                        for k, v in chunk.items()}))
    return parts[0], parts[1]


def _first_ts(chunk: Chunk) -> int:
    """The job's clock at the start of what a chunk reports, from the reports that carry their
    attempt (a job event, steps); 0 for the others (kernel summaries have no time, device samples
    no attempt: a late sample of the old attempt must not date the new one)."""
    if is_job(chunk):
        return int(chunk.get("ts_ns") or 0)
    if is_steps(chunk):
        starts = chunk.get("start_ns")  # a list (JSON) or an array (a binary frame)
        return int(np.min(starts)) if starts is not None and len(starts) else 0
    return 0


def _undecided(engine: JobEngine, now_ns: int) -> bool:
    """A running job the fleet still judges: started, no verdict yet, not past `expected_decide_by`. Started: a
    frame judged, or its `start` record in less than `job_silence_s` ago (in a backlog a job's start comes in on
    the small jobs topic well before its steps; a job that has sent nothing else that long is as silent as a
    stopped one)."""
    state = getattr(engine, "expected", None)
    if state is None or engine.ended or engine.stopped or state.decided or state.below or state.cleared:
        return False
    seen_ns = getattr(engine, "start_seen_ns", 0)
    return state.frames > 0 or (seen_ns > 0 and now_ns - seen_ns < engine.cfg.job_silence_s * 1e9)


def _job_clock(engine: JobEngine) -> int:
    """How far a job has been judged on its own clock: its newest judged step's end, or its start while no
    step is judged (a snapshot from before `judged_ts_ns` has none: behind, so a below job waits longer)."""
    return getattr(engine, "judged_ts_ns", 0) or getattr(engine, "start_ts_ns", 0)


@dataclass(slots=True)
class FleetEngine:
    """Every job this worker owns."""

    cfg: DetectionConfig
    jobs: dict[str, JobEngine] = field(default_factory=dict)
    # jobs finished and let go (`evict`): job -> (its last attempt, the job's clock at its end), oldest first
    finished: dict[str, tuple[int, int]] = field(default_factory=dict)
    late_after_finish: int = 0  # chunks of a finished, let-go attempt: counted, never a new job
    # the fleet's reference models: the export named by `reference_models`, and what its healthy jobs teach
    learner: expected.FleetLearner = field(default_factory=expected.FleetLearner)
    drift_book: IncidentBook = field(default_factory=lambda: IncidentBook(job="fleet"))  # fleet-wide drift
    drift_round: int = 0  # the drift book's "step": one per refit
    # per job waiting for the models, its judged frames at the last refit; the refits' cost and since when
    refit_frames: dict[str, int] = field(default_factory=dict)
    refit_cost_s: float = 0.0
    refit_since: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if self.cfg.reference_models and self.learner.base is None:
            with open(self.cfg.reference_models, "rb") as fh:
                self.learner.base = ReferenceModels.from_json(fh.read())

    def learn(self, now_ns: int, force: bool = False) -> None:
        """Pool what the jobs under no incident show and refit, every `expected_refit_s`, and sooner for a job
        waiting for the models (`WAITING_REFIT_FRAMES` of its frames since the last refit)."""
        waiting = self._waiting()
        if not force and now_ns - self.learner.refit_ns < self.cfg.expected_refit_s * 1e9 and not (
                any(frames - self.refit_frames.get(name, 0) >= WAITING_REFIT_FRAMES
                    for name, frames in waiting.items())
                and self.refit_cost_s <= WAITING_REFIT_SHARE * (time.perf_counter() - self.refit_since)):
            return
        t0 = time.perf_counter()
        self.learner.refit_ns = now_ns
        for name, engine in self.jobs.items():
            self._teach(name, engine)
        self.learner.refit(self.cfg.expected_min_jobs)
        self.refit_frames = waiting
        self.refit_cost_s += time.perf_counter() - t0

    def _waiting(self) -> dict[str, int]:
        """The running jobs still being judged against the fleet, past their warm-up: each one's frames so far."""
        warmup = self.cfg.expected_warmup_steps
        out: dict[str, int] = {}
        for name, engine in self.jobs.items():
            state = getattr(engine, "expected", None)
            if state is not None and state.frames > warmup and not (engine.ended or engine.stopped) \
                    and expected.judging(state):
                out[name] = state.frames
        return out

    def judge_drift(self, now_ns: int) -> list[Output]:
        """Fleet-wide drift, every tick: one incident (job "fleet") when most running jobs of one link class or
        device kind are below the reference together; their own BELOW_EXPECTED findings stop (and a job's
        verdict waits for this judgement: one tick). The drift book's steps are these judgements (ticks)."""
        judged: dict[str, set[str]] = {}
        below: dict[str, set[str]] = {}
        undecided = {name: _job_clock(engine) for name, engine in self.jobs.items() if _undecided(engine, now_ns)}
        for name, engine in self.jobs.items():
            peers = [ts for peer, ts in undecided.items() if peer != name]
            engine.peers_undecided = bool(peers)
            engine.peers_behind = bool(peers) and min(peers) < getattr(engine, "below_ts_ns", 0)
            state = getattr(engine, "expected", None)
            # running: neither ended nor stopped (silent `job_silence_s`, no `end`: a crash, a kill); a dead
            # job's old verdict would dilute the share of the jobs still running
            if state is None or engine.ended or engine.stopped or not (state.below or state.cleared):
                continue
            seen, low = expected.classes(state, engine.device_kind)
            for cls in seen:
                judged.setdefault(cls, set()).add(name)
            for cls in low:
                below.setdefault(cls, set()).add(name)
        if not below and not self.drift_book.tracks:
            self._reviewed()
            return []
        self.drift_round += 1
        found = expected.drift_findings(judged, below, self.drift_round, self.cfg.expected_drift_jobs,
                                        self.cfg.expected_drift_share, DRIFT_RESOLVE_TICKS)
        out = list(self.drift_book.observe(self.drift_round, found, now_ns))
        drifting = frozenset(t.finding.key.removeprefix("drift:") for t in self.drift_book.tracks.values()
                             if t.opened)
        for engine in self.jobs.values():
            engine.drift = drifting
        self._reviewed()
        return out

    def _reviewed(self) -> None:
        for engine in self.jobs.values():
            state = getattr(engine, "expected", None)
            if state is not None and len(state.reviewed) != len(state.below):
                state.reviewed = list(state.below)

    def _teach(self, name: str, engine: JobEngine) -> None:
        state = getattr(engine, "expected", None)
        if state is None:
            return
        if engine.book.open_incidents() or state.below:
            self.learner.take(name, state, healthy=False)  # under an incident: it teaches nothing
        elif not engine.book.tracks:  # a candidate may become one: its figures wait
            running = not (engine.ended or engine.stopped)
            self.learner.take(name, state, healthy=True, judging=expected.judging(state) if running else frozenset())

    def evict(self, job: str) -> JobEngine:
        """Let a finished job's state go (its final snapshot is on the state topic), remembering that it
        finished: a chunk of that attempt read after this (kernel summaries on their own topic, read by
        another decode member, can trail the `end` and the last step) is late, not a new job (one made of
        a trailing summary's ranks alone opened frames that timed out into HUNG_RANK for every other rank)."""
        engine = self.jobs.pop(job)
        self._teach(job, engine)
        self.finished.pop(job, None)
        self.finished[job] = (engine.attempt, engine.end_ts_ns)
        while len(self.finished) > FINISHED_JOBS_KEPT:
            del self.finished[next(iter(self.finished))]
        return engine

    def _after_finish(self, job: str, chunk: Chunk) -> bool:
        """True: `chunk` belongs to a finished, let-go attempt of `job` (counted late). A later attempt's
        chunk (a relaunch under the same id) starts the job afresh; device samples, which carry no
        attempt, are the finished attempt's when taken before its end."""
        done = self.finished.get(job)
        if done is None or job in self.jobs:
            return False
        attempt, end_ts_ns = done
        chunk_attempt = chunk.get("attempt")
        if isinstance(chunk_attempt, int):
            late = chunk_attempt <= attempt
        elif is_device(chunk):
            taken = _stamps(chunk)
            late = end_ts_ns > 0 and (not taken.size or int(taken.max()) <= end_ts_ns)
        else:
            late = True
        if late:
            self.late_after_finish += 1
        else:
            del self.finished[job]
        return late

    def job(self, job: str) -> JobEngine:
        engine = self.jobs.get(job)
        if engine is None:
            engine = self.jobs[job] = JobEngine.create(job, self.cfg)
        return engine

    lagging: bool = False  # what the newest chunk said of the decode stage's input
    lag_seen_ns: int = 0
    quiet_ticks: int = 0  # ticks since the last chunk
    awake_ns: int = 0  # when this fleet (this worker process) first ran: no job was silent to it before

    def on_chunk(self, chunk: Chunk, now_ns: int) -> list[Output]:
        self.quiet_ticks = 0
        self.awake_ns = self.awake_ns or now_ns
        lagging = input_lagging(chunk, self.cfg.batch_max, now_ns)
        if lagging is not None:
            self.lagging, self.lag_seen_ns = lagging, now_ns
        job = chunk.get("job")
        if not isinstance(job, str) or not job:
            return []  # device samples nobody attributed to a job: landed, not analysed
        if self._after_finish(job, chunk):
            return []
        engine = self.job(job)
        self._woken(engine)
        out: list[Output] = []
        attempt = chunk.get("attempt")  # device samples carry none: they go to the attempt of their time
        lagging = self.lagging_now(now_ns)
        prev = engine.previous
        if prev is not None and is_device(chunk) and engine.launch_ts_ns:
            before, after = _split_device(chunk, engine.launch_ts_ns)
            if before is not None:
                out.extend(prev.on_chunk(before, now_ns, lagging))
            if after is None:
                return out
            chunk = after
        if isinstance(attempt, int) and attempt != engine.attempt:
            if prev is not None and attempt == prev.attempt:  # the replaced attempt's reports, from a backlog
                out.extend(prev.on_chunk(chunk, now_ns, lagging))
                return out
            if attempt < engine.attempt:  # an earlier attempt's report, after its relaunch's reports were in
                engine.stats.chunks += 1
                engine.stats.late += 1
                return out
            engine = self.jobs[job] = engine.relaunched(attempt)
        # one judge of "lagging" for chunks and ticks alike: right after a chunk that says, it is that
        engine.reference = self.learner.reference()
        out.extend(engine.on_chunk(chunk, now_ns, lagging))
        return out

    def _woken(self, engine: JobEngine) -> None:
        """A job restored from a snapshot, first met by this process (its tick or its chunk, whichever comes
        first): the worker was down, not the job, nor its ranks. Their silence counts from the start-up
        (a rank whose partition this process reads later than its peers' is hung only `hang_silence_s` on)."""
        if 0 < engine.heard_ns < self.awake_ns:
            engine.heard_ns = self.awake_ns
            np.maximum(engine.frames.heard_ns, self.awake_ns, out=engine.frames.heard_ns)

    def heard(self, now_ns: int) -> None:
        """The engine was busy until `now_ns` (a batch of chunks, a long tick), not waiting for input.

        A batch is stamped with the time it started, and a batch or a tick can take seconds (tens
        in a large backlog); that time is no silence of the input.
        """
        self.lag_seen_ns = max(self.lag_seen_ns, now_ns)

    def lagging_now(self, now_ns: int) -> bool:
        """Whether the decode stage is behind its input now: the newest chunk said so, and the
        engine has heard a chunk within LAG_STALE_NS or QUIET_TICKS ticks (see `tick`)."""
        return self.lagging and (now_ns - self.lag_seen_ns <= LAG_STALE_NS or self.quiet_ticks <= QUIET_TICKS)

    def tick(self, now_ns: int) -> list[Output]:
        """Release what is ready in every job, each judging "lagging" by the newest input.

        A job's own last chunk may have said "lagging" long ago (its backlog drained, or it just
        has nothing more to send); the decode stage's state is the fleet's newest chunk, and no
        chunk for LAG_STALE_NS of idle time and QUIET_TICKS ticks means it has nothing queued:
        the input is current.
        """
        self.quiet_ticks += 1
        self.awake_ns = self.awake_ns or now_ns
        lagging = self.lagging_now(now_ns)
        self.learn(now_ns)
        out = self.judge_drift(now_ns)
        reference = self.learner.reference()
        for engine in list(self.jobs.values()):
            engine.frames.input_lagging = lagging
            engine.reference = reference
            self._woken(engine)
            out.extend(engine.tick(now_ns))
        return out

    def open_windows(self) -> int:
        return sum(len(e.frames.frames) for e in self.jobs.values())

    def open_incidents(self) -> int:
        return sum(e.book.open_incidents() for e in self.jobs.values())
