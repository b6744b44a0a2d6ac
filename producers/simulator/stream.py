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
    """One job being streamed; collects what the scorer needs (onsets, rank-steps)."""

    job: FleetJob
    include: tuple[Kind, ...] = ("step", "kernel_summary", "device")
    packed: bool = True
    onset_ns: dict[int, int] = field(default_factory=dict)
    rank_steps: int = 0
    events: int = 0
    records: int = 0
    last_completed: int = -1
    _frames: Iterator[StepFrame] | None = None
    _encoder: FrameEncoder | None = None
    _pack_keys: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def faults(self) -> tuple[FaultSpec, ...]:
        return self.job.faults

    def start_event(self) -> bytes:
        return encode(JobEvent(job=self.job.job_id, phase="start", world=self.job.world, ts_ns=self.job.start_ns,
                               parallel=self.job.topology.parallel(), model=self.job.model.name,
                               kernel_summaries="kernel_summary" in self.include))

    def end_event(self, ts_ns: int) -> bytes:
        return encode(JobEvent(job=self.job.job_id, phase="end", world=self.job.world, ts_ns=ts_ns,
                               parallel=self.job.topology.parallel(), model=self.job.model.name,
                               last_step=max(0, self.last_completed)))

    def next_frame(self) -> StepFrame | None:
        if self._frames is None:
            self._frames = self.job.iter_frames()
            self._encoder = FrameEncoder(self.job, self.include)
        frame = next(self._frames, None)
        if frame is not None:
            for n, fault in enumerate(self.job.faults):
                if fault.start == frame.step:
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
                out = f"{self.job.job_id}/node-{int(self.job.topology.host_ids[int(tail)])}".encode()
            self._pack_keys[ev.key] = out
        return out


def stream_runs(runs: list[SimRun], topics: Topics, send: Send, *, paced: bool = False,
                on_step: Callable[[], None] | None = None) -> None:
    """Send every run's job start, all its frames (interleaved across runs) and its job end."""
    if paced:
        now = time.time_ns()
        for run in runs:
            run.job.start_ns = now
    for run in runs:
        send(topics.jobs, job_key(run.job.job_id), run.start_event())
    active = list(runs)
    last_end = {id(r): r.job.start_ns for r in runs}
    while active:
        pending: list[tuple[SimRun, StepFrame]] = []
        for run in list(active):
            frame = run.next_frame()
            if frame is None:
                active.remove(run)
                send(topics.jobs, job_key(run.job.job_id), run.end_event(last_end[id(run)]))
                continue
            last_end[id(run)] = frame.end_ns
            pending.append((run, frame))
        for run, frame in sorted(pending, key=lambda p: p[1].end_ns):
            if paced:
                wait = (frame.end_ns - time.time_ns()) / 1e9
                if wait > 0:
                    time.sleep(wait)
            run.send_frame(frame, topics, send)
        if on_step is not None:
            on_step()
