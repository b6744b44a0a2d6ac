"""Send simulated jobs to Kafka: many jobs interleaved step by step, as fast as possible or paced.

As fast as possible (scoring): every job's next step goes out in turn, timestamps on the
simulated clock. Paced (latency): the job clock starts now and each step is sent when the
wall clock reaches its end, so detection delay in seconds is measurable.

Packed (the default, contract 1.2): the simulator models a node agent, so one host's events
of one topic and one step go out as ONE record, a JSON array keyed `job/host` (device
samples: keyed `host`); `packed=False` sends one record per event (keys `job/rank`,
`host/device`, the 1.0/1.1 form) so both can be measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from producers.simulator.attempts import Attempt
from producers.simulator.catalogue import FaultSpec
from producers.simulator.events import FrameEncoder, Kind, WireEvent
from producers.simulator.fleet import FleetJob, StepFrame
from schemas import MAX_PACKED_EVENTS, JobEvent, Topics, encode, job_key

Send = Callable[[str, bytes, bytes], None]

# A packed record stays well under the broker's 1 MB message limit.
MAX_PACKED_BYTES = 900_000


def pack(events: list[WireEvent], key_of: Callable[[WireEvent], bytes]) -> Iterator[tuple[str, bytes, bytes]]:
    """(kind, key, array value) per group of `events` sharing kind and pack key, in emission order.

    The values are already JSON objects, so an array is their bytes joined: no re-encoding.
    A group above MAX_PACKED_EVENTS events or MAX_PACKED_BYTES is cut into several records.
    """
    groups: dict[tuple[str, bytes], list[bytes]] = {}
    for ev in events:
        groups.setdefault((ev.kind, key_of(ev)), []).append(ev.value)
    for (kind, key), values in groups.items():
        part: list[bytes] = []
        size = 2
        for value in values:
            if part and (len(part) >= MAX_PACKED_EVENTS or size + len(value) + 1 > MAX_PACKED_BYTES):
                yield kind, key, b"[" + b",".join(part) + b"]"
                part, size = [], 2
            part.append(value)
            size += len(value) + 1
        yield kind, key, b"[" + b",".join(part) + b"]"


@dataclass(slots=True)
class SimRun:
    """One job being streamed; collects what the scorer needs (onsets, rank-steps).

    `job` is its first launch; `later` the relaunches after a crash (producers.simulator.attempts),
    streamed under the same job id once their gap has passed on the stream's clock."""

    job: FleetJob
    include: tuple[Kind, ...] = ("step", "kernel_summary", "device")
    packed: bool = True
    later: tuple[Attempt, ...] = ()
    onset_ns: dict[int, int] = field(default_factory=dict)
    rank_steps: int = 0
    events: int = 0
    records: int = 0
    last_completed: int = -1
    _current: FleetJob | None = None
    _launched: int = 0  # how many of `later` have started
    _last_end_ns: int = 0  # the newest frame's end on the job clock (0: none streamed yet)
    _frames: Iterator[StepFrame] | None = None
    _encoder: FrameEncoder | None = None
    _pack_keys: dict[bytes, bytes] = field(default_factory=dict)

    @classmethod
    def of_attempts(cls, attempts: list[Attempt], **kw: Any) -> SimRun:
        return cls(attempts[0].job, later=tuple(attempts[1:]), **kw)

    @property
    def current(self) -> FleetJob:
        """The launch being streamed now."""
        return self._current or self.job

    @property
    def faults(self) -> tuple[FaultSpec, ...]:
        """Every launch's faults (the ground truth), the first launch's first."""
        return (*self.job.faults, *(f for a in self.later for f in a.job.faults))

    @property
    def last_end_ns(self) -> int:
        """The job clock at the newest frame's end (its start before any frame)."""
        return self._last_end_ns or self.job.start_ns

    def next_attempt(self) -> Attempt | None:
        """The relaunch that follows the current launch, if it crashed and one is planned."""
        if self.current.crash_step is None or self._launched >= len(self.later):
            return None
        return self.later[self._launched]

    def relaunch(self, start_ns: int) -> None:
        """Stream the next attempt from now on, its job clock starting at `start_ns`."""
        attempt = self.next_attempt()
        if attempt is None:
            raise RuntimeError("no relaunch planned after this launch")
        self._launched += 1
        self._current = attempt.job
        self._current.start_ns = start_ns
        self._frames = self._encoder = None
        self._pack_keys.clear()
        self.last_completed = -1

    def start_event(self) -> bytes:
        job = self.current
        return encode(JobEvent(job=job.job_id, phase="start", world=job.world, ts_ns=job.start_ns,
                               parallel=job.topology.parallel(), model=job.model.name,
                               kernel_summaries="kernel_summary" in self.include, attempt=job.attempt))

    def end_event(self, ts_ns: int) -> bytes:
        job = self.current
        return encode(JobEvent(job=job.job_id, phase="end", world=job.world, ts_ns=ts_ns,
                               parallel=job.topology.parallel(), model=job.model.name,
                               last_step=max(0, self.last_completed), attempt=job.attempt))

    def next_frame(self) -> StepFrame | None:
        job = self.current
        if self._frames is None:
            self._frames = job.iter_frames()
            self._encoder = FrameEncoder(job, self.include)
        frame = next(self._frames, None)
        if frame is None and job.crash_step is not None:  # the crash's onset: when its last step ended
            for n, fault in enumerate(self.faults):
                if fault.kind == "job_crash" and fault.attempt == job.attempt:
                    self.onset_ns.setdefault(n, self._last_end_ns)
        if frame is not None:
            self._last_end_ns = frame.end_ns
            for n, fault in enumerate(self.faults):
                if fault.start == frame.step and fault.attempt == job.attempt:
                    self.onset_ns[n] = frame.start_ns
            if frame.completed:
                self.last_completed = frame.step
                self.rank_steps += int(frame.reporting.sum())
        return frame

    def send_frame(self, frame: StepFrame, topics: Topics, send: Send) -> None:
        assert self._encoder is not None
        topic = {"step": topics.steps, "kernel_summary": topics.kernel_summaries, "device": topics.device}
        if not self.packed:
            for ev in self._encoder.encode(frame):
                send(topic[ev.kind], ev.key, ev.value)
                self.events += 1
                self.records += 1
            return
        events = list(self._encoder.encode(frame))
        for kind, key, value in pack(events, self._pack_key):
            send(topic[kind], key, value)
            self.records += 1
        self.events += len(events)

    def _pack_key(self, ev: WireEvent) -> bytes:
        """`job/host` for a rank's events (key `job/rank`), `host` for a device sample (key `host/device`)."""
        out = self._pack_keys.get(ev.key)
        if out is None:
            head, _, tail = ev.key.rpartition(b"/")
            if ev.kind == "device":
                out = head
            else:
                job = self.current
                out = f"{job.job_id}/{job.host_names[int(job.topology.host_ids[int(tail)])]}".encode()
            self._pack_keys[ev.key] = out
        return out


@dataclass(slots=True)
class SimulatedClock:
    """A clock for `stream_runs` that waits by jumping ahead (a dry run, an in-process replay)."""

    ns: int = 0

    def now(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += round(seconds * 1e9)


def stream_runs(runs: list[SimRun], topics: Topics, send: Send, *, paced: bool = False,
                on_step: Callable[[], None] | None = None, clock: Callable[[], int] = time.monotonic_ns,
                idle: Callable[[float], None] = time.sleep, later: dict[str, int] | None = None) -> None:
    """Send every run's job start, all its frames (interleaved across runs) and its job end.

    A launch that crashed sends no end; its relaunch starts (a new `start`, the same job id)
    once its gap has passed on `clock` (ns; the in-process replay passes its simulated clock and
    an `idle` that advances it), while the other runs go on streaming. `later`: job id -> rounds
    of the others' frames sent before that job starts (a fleet's jobs do not all start at once)."""
    if paced:
        now = time.time_ns()
        for run in runs:
            run.job.start_ns = now
    later = dict(later or {})
    queued = [run for run in runs if later.get(run.job.job_id, 0) > 0]
    for run in runs:
        if run not in queued:
            send(topics.jobs, job_key(run.job.job_id), run.start_event())
    active = [run for run in runs if run not in queued]
    waiting: list[tuple[int, SimRun]] = []  # (clock ns when it relaunches, run)
    rounds = 0
    while active or waiting or queued:
        for run in [r for r in queued if later[r.job.job_id] <= rounds]:
            queued.remove(run)
            send(topics.jobs, job_key(run.job.job_id), run.start_event())
            active.append(run)
        rounds += 1
        for due in [w for w in waiting if w[0] <= clock()]:
            waiting.remove(due)
            run = due[1]
            gap = run.next_attempt()
            assert gap is not None
            run.relaunch(time.time_ns() if paced else run.last_end_ns + round(gap.gap_s * 1e9))
            send(topics.jobs, job_key(run.job.job_id), run.start_event())
            active.append(run)
        if not active:
            if waiting:
                idle(max(0.0, (min(t for t, _ in waiting) - clock()) / 1e9))
            continue
        pending: list[tuple[SimRun, StepFrame]] = []
        for run in list(active):
            frame = run.next_frame()
            if frame is None:
                active.remove(run)
                if run.current.crash_step is None:
                    send(topics.jobs, job_key(run.job.job_id), run.end_event(run.last_end_ns))
                following = run.next_attempt()
                if following is not None:
                    waiting.append((clock() + round(following.gap_s * 1e9), run))
                continue
            pending.append((run, frame))
        for run, frame in sorted(pending, key=lambda p: p[1].end_ns):
            if paced:
                wait = (frame.end_ns - time.time_ns()) / 1e9
                if wait > 0:
                    time.sleep(wait)
            run.send_frame(frame, topics, send)
        if on_step is not None:
            on_step()
