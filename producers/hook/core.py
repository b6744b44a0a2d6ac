"""The framework-agnostic rank hook: step boundaries, phases, GC, data latency, kernel summary.

Everything here runs on the training thread, so every public entry point is guarded: an
exception inside the hook is counted (`HookStats.errors`) and swallowed, never raised into the
training loop. Events leave through an emitter whose `emit` only appends to a bounded queue
(producers/emitter.py); the hook itself does no I/O on the training thread, except when a
control command asked for detailed profiling of a step range (then the profiler dump is
written when the last profiled step ends, which is the price of asking for it).

Fork safety: a forked child (a DataLoader worker, a launcher) must not share the parent's
emitter thread, so after a fork the hook forgets its emitter and the child builds a fresh one
(with its own thread) on its first emit; children that never emit never start a thread.
At interpreter exit the hook emits nothing more, flushes the emitter (bounded) and closes it.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from producers.hook.aggregate import AggSnapshot, KernelAggregator
from producers.hook.profiling import ProfilerBackend, ProfileRequest, ProfileResult
from schemas import ControlCommand, Domain, Event, KernelBatch, KernelSummary, Phases, ProfileReady, StepEvent
from schemas.bounds import UINT16
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory

log = logging.getLogger(__name__)

T = TypeVar("T")

# The builder thread polls for finished steps at this interval instead of being woken per step:
# waking a thread costs the training thread a futex call and often a context switch + GIL hand-off.
# Each round's events go to the emitter at once and are sent then, so this is also the send
# cadence; `producers.hook.start()` sets it to Settings.hook_flush_interval_s.
BUILD_INTERVAL_S = 0.2
MAX_RAW_RECORDS_PER_STEP = 100_000  # kernel/collective records kept per step before counting drops
_COLL, _KERNEL, _OTHER = 0, 1, 2  # kinds of raw kernel records

PHASES = ("data", "forward", "backward", "grad", "optimizer", "comm_exposed", "gc")

# Reasons a control command is not acted on (keys of HookStats.commands_ignored).
OTHER_JOB = "other_job"
OTHER_RANK = "other_rank"
PAST_STEPS = "past_steps"
UNSUPPORTED = "unsupported"
NO_PROFILER = "no_profiler"


class Emitter(Protocol):
    """What the hook needs from producers.emitter.BackgroundEmitter."""

    def emit(self, event: Event) -> bool: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self, timeout: float | None = 10.0) -> bool: ...


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Who this process is in the job: the identity every event carries."""

    job: str
    rank: int
    world: int
    host: str
    device: int
    domains: dict[str, Domain] = field(default_factory=dict)
    attempt: int = 0  # the job's launch (contract 1.4): 0 first, counted up by each relaunch


def launcher_attempt(env: Mapping[str, str]) -> int:
    """The job's attempt from the launcher: torchrun / torchelastic export how many times it
    restarted the workers (TORCHELASTIC_RESTART_COUNT); 0 when absent or not a count."""
    raw = env.get("TORCHELASTIC_RESTART_COUNT", "")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) <= UINT16[1] else 0


@dataclass(frozen=True, slots=True)
class HookStats:
    """Counters since the hook started (read them from the training thread or a test).

    events: events handed to the emitter; errors: exceptions swallowed by hook entry points.
    overhead_ns: time spent inside hook entry points on the training thread.
    """

    steps: int = 0
    events: int = 0
    errors: int = 0
    overhead_ns: int = 0
    hook_calls: int = 0
    commands_accepted: int = 0
    commands_ignored: dict[str, int] = field(default_factory=dict)
    profiles: int = 0

    @property
    def us_per_event(self) -> float:
        return self.overhead_ns / 1e3 / self.events if self.events else 0.0


class _StepState:
    """The open step, as little as the training thread must write: raw times and appended records.

    Phase durations are appended as (name, ms) and kernel/collective records as raw tuples; the
    builder thread sums and aggregates them (dicts, dataclasses and maths cost the training thread).
    """

    __slots__ = ("interstep_ns", "kernels", "open_phases", "phases", "start_ns", "step", "t0")

    def __init__(self, step: int, start_ns: int, t0: int, interstep_ns: int | None) -> None:
        self.step = step
        self.start_ns = start_ns
        self.t0 = t0  # perf_counter_ns at begin
        self.interstep_ns = interstep_ns
        self.phases: list[tuple[str, float]] = []
        self.open_phases: dict[str, int] = {}
        self.kernels: list[tuple[Any, ...]] = []


@dataclass(slots=True)
class _DoneStep:
    """What the training thread hands over at step end (numbers only, no event building)."""

    state: _StepState
    end_ns: int
    samples: int | None
    tokens: int | None
    batch_size: int | None
    flops: float | None
    gc_ms: float | None
    gc_count: int | None
    profiling: bool
    rank: RankInfo


_STOP: Any = object()


class RankHook:
    """Per-rank step telemetry; one per training process.

    `emitter_factory` builds the emitter lazily (first emit) and again in a forked child.
    `profiler_factory` builds the detailed profiler a control command switches on (None: the
    hook ignores profiling commands, counted as `no_profiler`). `build_interval_s`: how often the
    builder thread turns finished steps into events (the training thread never wakes it).
    """

    def __init__(
        self,
        rank: RankInfo,
        emitter_factory: Callable[[], Emitter],
        *,
        profiler_factory: Callable[[ProfileRequest], ProfilerBackend] | None = None,
        profile_root: Path | None = None,
        peak_flops: float | None = None,
        track_gc: bool = True,
        close_timeout_s: float = 10.0,
        build_interval_s: float = BUILD_INTERVAL_S,
    ) -> None:
        self.rank = rank
        self._emitter_factory = emitter_factory
        self._emitter: Emitter | None = None
        self._profiler_factory = profiler_factory
        self.profile_root = profile_root or Path(tempfile.gettempdir()) / "steplens-profiles"
        self.peak_flops = peak_flops
        self._close_timeout = close_timeout_s
        self._pid = os.getpid()
        self._closed = False
        self._next_step = 0
        self._cur: _StepState | None = None
        self._last_end_pc: int | None = None
        self._agg = KernelAggregator()  # builder thread only
        self._kraw: list[tuple[Any, ...]] = []  # the open step's raw kernel records (training thread)
        self._kraw_dropped = 0
        self._build_interval = build_interval_s
        self._gc_t0 = 0
        self._gc_ms = 0.0
        self._gc_n = 0
        self._track_gc = False
        # counters (training thread only, except commands which use the lock)
        self._steps = 0
        self._events = 0
        self._errors = 0
        self._overhead = 0
        self._calls = 0
        self._profiles = 0
        self._lock = threading.Lock()
        self._em_lock = threading.Lock()
        self._requests: deque[ProfileRequest] = deque()
        self._accepted = 0
        self._ignored: dict[str, int] = {}
        self._active: tuple[ProfileRequest, ProfilerBackend] | None = None
        self._followers: list[Any] = []
        self._builder: threading.Thread | None = None
        self._builder_pid = 0
        self._done: deque[Any] = deque()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._queued = 0
        self._built = 0
        if track_gc:
            self._install_gc()
        _register_lifecycle(self)

    # --- identity ------------------------------------------------------------------------
    @property
    def next_step(self) -> int:
        """The index the next step_begin() without an explicit step will get."""
        return self._next_step

    def set_domains(self, domains: dict[str, Domain]) -> None:
        self.rank = RankInfo(self.rank.job, self.rank.rank, self.rank.world, self.rank.host, self.rank.device,
                             dict(domains), self.rank.attempt)

    # --- step API ------------------------------------------------------------------------
    def step_begin(self, step: int | None = None) -> None:
        """Mark the start of a step (index defaults to the previous one + 1)."""
        t = time.perf_counter_ns()
        try:
            self._step_begin(step, t)
        except Exception:
            self._errors += 1
        self._account(t)

    def step_end(
        self,
        *,
        samples: int | None = None,
        tokens: int | None = None,
        batch_size: int | None = None,
        flops: float | None = None,
    ) -> None:
        """Mark the end of the current step and emit its step event and kernel summary."""
        t = time.perf_counter_ns()
        try:
            self._step_end(samples, tokens, batch_size, flops, t)
        except Exception:
            self._errors += 1
        self._account(t)

    # callback spellings for frameworks with begin/end callbacks
    on_step_begin = step_begin
    on_step_end = step_end

    def step(self, step: int | None = None, **totals: Any) -> _StepContext:
        """`with hook.step():` around one training step; `totals` go to step_end (samples=, tokens=...)."""
        return _StepContext(self, step, totals)

    def phase_begin(self, name: str) -> None:
        t = time.perf_counter_ns()
        try:
            cur = self._cur
            if cur is not None:
                cur.open_phases[name] = t
        except Exception:
            self._errors += 1
        self._account(t)

    def phase_end(self, name: str) -> None:
        t = time.perf_counter_ns()
        try:
            cur = self._cur
            if cur is not None:
                t0 = cur.open_phases.pop(name, None)
                if t0 is not None:
                    cur.phases.append((name, (t - t0) / 1e6))
        except Exception:
            self._errors += 1
        self._account(t)

    def forward_until(self, t: int) -> None:
        """Close the forward phase at perf_counter_ns `t` (backward starts): it began when the step's
        batch was ready, or at step begin; nothing if a forward phase was already measured."""
        try:
            cur = self._cur
            if cur is not None and "forward" not in cur.open_phases:
                start = max(cur.t0, self._data_end_pc)
                if t > start and not any(name == "forward" for name, _ in cur.phases):
                    cur.phases.append(("forward", (t - start) / 1e6))
        except Exception:
            self._errors += 1

    def phase(self, name: str) -> _PhaseContext:
        """`with hook.phase("forward"):` adds the block's wall time to that phase of the current step."""
        return _PhaseContext(self, name)

    def add_phase_ms(self, name: str, ms: float) -> None:
        """Add a measured duration to a phase of the current step (e.g. from a framework callback)."""
        try:
            cur = self._cur
            if cur is not None and ms >= 0:
                cur.phases.append((name, ms))
        except Exception:
            self._errors += 1

    # --- kernels and collectives ---------------------------------------------------------------
    def record_collective(
        self,
        op: CollectiveOp,
        dur_ns: int,
        *,
        nbytes: int | None = None,
        domain: str | None = None,
        group_size: int | None = None,
        launch_us: float | None = None,
    ) -> None:
        """One collective of the current step (from a work object, a comm hook or a profiler).

        Only appended here; the builder thread aggregates it into the step's kernel summary.
        """
        kraw = self._kraw
        if len(kraw) < MAX_RAW_RECORDS_PER_STEP:
            kraw.append((_COLL, op, dur_ns, nbytes, domain, group_size, launch_us))
        else:
            self._kraw_dropped += 1

    def record_kernel(
        self,
        key: str,
        cat: KernelCategory,
        dur_ns: int,
        *,
        metric: str | None = None,
        shape: dict[str, int] | None = None,
        flops: float | None = None,
        nbytes: int | None = None,
        direction: CopyDirection | None = None,
        launch_us: float | None = None,
        monitored: bool = True,
    ) -> None:
        """One kernel of the current step; unmonitored kinds only count towards `other` (R7)."""
        kraw = self._kraw
        if len(kraw) < MAX_RAW_RECORDS_PER_STEP:
            kraw.append((_KERNEL, key, cat, dur_ns, metric, shape, flops, nbytes, direction, launch_us, monitored)
                        if monitored else (_OTHER, dur_ns))
        else:
            self._kraw_dropped += 1

    # --- data loading ----------------------------------------------------------------------
    def wrap_loader(self, iterable: Iterable[T]) -> Iterator[T]:
        """Iterate `iterable`, adding each `__next__`'s wall time to the data phase (D1).

        A batch fetched between steps (the usual `for batch in loader:` shape) is credited to
        the step that follows.
        """
        return _TimedIterator(self, iter(iterable))

    def _data_ms(self, ms: float) -> None:
        cur = self._cur
        if cur is not None:
            cur.phases.append(("data", ms))
        else:
            self._pending_data_ms += ms

    _pending_data_ms: float = 0.0
    _data_end_pc: int = 0  # perf_counter_ns when the last batch was ready

    # --- control ----------------------------------------------------------------------------
    def submit_command(self, cmd: ControlCommand) -> bool:
        """Called from the control thread: queue a profiling request for this rank, or count why not."""
        reason: str | None = None
        if cmd.job != self.rank.job:
            reason = OTHER_JOB
        elif cmd.ranks and self.rank.rank not in cmd.ranks:
            reason = OTHER_RANK
        elif cmd.action != "profile_on":
            reason = UNSUPPORTED
        elif self._profiler_factory is None:
            reason = NO_PROFILER
        elif cmd.step_first + cmd.step_count - 1 < self._next_step:
            reason = PAST_STEPS
        with self._lock:
            if reason is not None:
                self._ignored[reason] = self._ignored.get(reason, 0) + 1
                return False
            self._accepted += 1
            self._requests.append(ProfileRequest(
                command_id=cmd.command_id, step_first=cmd.step_first,
                step_last=cmd.step_first + cmd.step_count - 1, level=cmd.level,
                out_dir=self.profile_root / self.rank.job / f"rank{self.rank.rank}" / _safe(cmd.command_id),
            ))
        return True

    def add_follower(self, follower: Any) -> None:
        """Keep a control follower alive with the hook and stop it at close."""
        self._followers.append(follower)

    # --- lifecycle ------------------------------------------------------------------------------
    def emit(self, event: Event) -> bool:
        """Hand one event to the emitter (built on first use, rebuilt in a forked child)."""
        try:
            if self._closed:
                return False
            ok = self._live_emitter().emit(event)
            self._events += 1
            return ok
        except Exception:
            self._errors += 1
            return False

    def _live_emitter(self) -> Emitter:
        """This process's emitter: built on first use, rebuilt in a forked child (may raise)."""
        em = self._emitter
        return em if em is not None and self._pid == os.getpid() else self._new_emitter()

    def open(self) -> Emitter | None:
        """Build the emitter now (outside the training loop) instead of on the first emit."""
        try:
            return self._live_emitter()
        except Exception:
            self._errors += 1
            return None

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait (bounded) until every finished step is built and exported; for shutdown and tests."""
        deadline = None if timeout is None else time.monotonic() + timeout
        built = self._drain_builder(timeout)
        em = self._emitter
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return built and (True if em is None else em.flush(remaining))

    def close(self, timeout: float | None = None) -> bool:
        """Stop following control, remove the GC callback, flush and close the emitter (bounded)."""
        if self._closed:
            return True
        for f in self._followers:
            try:
                f.stop()
            except Exception:
                log.debug("control follower stop raised", exc_info=True)
        self._remove_gc()
        limit = self._close_timeout if timeout is None else timeout
        if self._builder is not None and self._builder_pid == os.getpid():
            self._drain_builder(limit)
            self._done.append(_STOP)
            self._wake.set()
            self._builder.join(limit)
        self._closed = True
        em, self._emitter = self._emitter, None
        if em is None or self._pid != os.getpid():
            return True
        try:
            return em.close(limit)
        except Exception:
            self._errors += 1
            return False

    @property
    def emitter(self) -> Emitter | None:
        return self._emitter

    def stats(self) -> HookStats:
        with self._lock:
            accepted, ignored = self._accepted, dict(self._ignored)
        return HookStats(steps=self._steps, events=self._events, errors=self._errors, overhead_ns=self._overhead,
                         hook_calls=self._calls, commands_accepted=accepted, commands_ignored=ignored,
                         profiles=self._profiles)

    # --- internals -------------------------------------------------------------------------------
    def _account(self, t0: int) -> None:
        self._overhead += time.perf_counter_ns() - t0
        self._calls += 1

    def _new_emitter(self) -> Emitter:
        with self._em_lock:  # the training thread and the builder may both get here first
            if self._pid != os.getpid():  # forked child: never touch the parent's emitter
                self._pid = os.getpid()
                self._emitter = None
            em = self._emitter
            if em is None:
                em = self._emitter = self._emitter_factory()
            return em

    def _after_fork(self) -> None:
        self._pid = -1  # forces a fresh emitter on the child's first emit
        self._emitter = None
        self._lock = threading.Lock()
        self._em_lock = threading.Lock()
        self._active = None
        self._followers = []
        self._builder = None  # the parent's builder thread does not exist here
        self._done = deque()

    def _step_begin(self, step: int | None, t: int) -> None:
        idx = self._next_step if step is None else step
        last = self._last_end_pc
        cur = self._cur = _StepState(idx, time.time_ns(), t, None if last is None else t - last)
        self._kraw = cur.kernels
        if self._pending_data_ms:
            cur.phases.append(("data", self._pending_data_ms))
            self._pending_data_ms = 0.0
        self._gc_ms = 0.0
        self._gc_n = 0
        if self._requests and self._active is None:
            self._maybe_start_profile(idx)

    def _step_end(self, samples: int | None, tokens: int | None, batch_size: int | None,
                  flops: float | None, t: int) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        self._kraw = []  # records between steps land here and are dropped at the next begin
        tracked = self._track_gc
        self._defer(_DoneStep(cur, cur.start_ns + (t - cur.t0), samples, tokens, batch_size, flops,
                              self._gc_ms if tracked else None, self._gc_n if tracked else None,
                              self._active is not None, self.rank))
        self._steps += 1
        self._next_step = cur.step + 1
        active = self._active
        if active is not None:
            req, prof = active
            prof.step(cur.step)
            if cur.step >= req.step_last:
                self._finish_profile(req, prof)
        self._last_end_pc = time.perf_counter_ns()

    # --- event building, off the training thread -----------------------------------------------
    def _defer(self, done: _DoneStep | Callable[[], None]) -> None:
        """Queue a finished step (or a job for the builder); the builder thread turns it into events.

        Building and encoding the events is most of the hook's cost; doing it on a helper thread
        lets it overlap with the training thread's GIL-free compute (torch ops, collectives). The
        append is all the training thread pays: no wake-up (the builder polls), no getpid (a fork
        handler resets the builder in a child).
        """
        if self._closed:
            return
        if self._builder is None:
            self._start_builder()
        self._queued += 1
        self._done.append(done)

    def _start_builder(self) -> None:
        self._builder_pid = os.getpid()
        self._queued = self._built = 0
        self._done = deque()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._builder = threading.Thread(target=self._build_loop, name="steplens-hook-builder", daemon=True)
        self._builder.start()

    def _build_loop(self) -> None:
        done, wake, idle = self._done, self._wake, self._idle
        while True:
            wake.wait(self._build_interval)
            wake.clear()
            out: list[Event] = []
            n = 0
            stop = False
            while done:
                item = done.popleft()
                if item is _STOP:
                    stop = True
                    break
                try:
                    if isinstance(item, _DoneStep):
                        self._build(item, out)
                    else:
                        item()
                except Exception:
                    self._errors += 1
                n += 1
            self._emit_round(out)
            if n or stop:  # an idle round wakes nobody
                self._built += n
                with idle:
                    idle.notify_all()
            if stop:
                return

    def _emit_round(self, events: list[Event]) -> None:
        """Hand one builder round's events to the emitter together, due at once: the builder's
        interval is the send cadence, and the emitter's worker wakes once per round."""
        if not events:
            return
        try:
            if self._closed:
                return
            em = self._live_emitter()
            batch = getattr(em, "emit_batch", None)
            if batch is not None:
                batch(events, send_now=True)
            else:
                for ev in events:
                    em.emit(ev)
            self._events += len(events)
        except Exception:  # counted per event, as a failed emit() is
            self._errors += len(events)

    def _aggregate(self, records: list[tuple[Any, ...]]) -> AggSnapshot | None:
        agg = self._agg
        agg.reset()
        for rec in records:
            kind = rec[0]
            if kind == _COLL:
                _, op, dur, nbytes, domain, group_size, launch_us = rec
                agg.add(f"{op}/{domain or '-'}", "comm", dur, op=op, domain=domain, group_size=group_size,
                        nbytes=nbytes, launch_us=launch_us)
            elif kind == _KERNEL:
                _, key, cat, dur, metric, shape, flops, nbytes, direction, launch_us, _m = rec
                agg.add(key, cat, dur, metric=metric, shape=shape, flops=flops, nbytes=nbytes, direction=direction,
                        launch_us=launch_us)
            else:
                agg.add_other(rec[1])
        dropped, self._kraw_dropped = self._kraw_dropped, 0
        agg.dropped += dropped
        return agg.take()

    def _build(self, d: _DoneStep, out: list[Event]) -> None:
        cur, r = d.state, d.rank
        ph: dict[str, float] = {}
        for name, ms in cur.phases:
            ph[name] = ph.get(name, 0.0) + ms
        try:
            kernels = self._aggregate(cur.kernels)
        except Exception:  # a bad record costs the summary, never the step event
            self._errors += 1
            kernels = None
        out.append(StepEvent(
            job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device, domains=r.domains,
            step=cur.step, start_ns=cur.start_ns, end_ns=d.end_ns,
            phases=Phases(
                data_ms=ph.get("data"), forward_ms=ph.get("forward"), backward_ms=ph.get("backward"),
                grad_ms=ph.get("grad"), optimizer_ms=ph.get("optimizer"), comm_exposed_ms=ph.get("comm_exposed"),
                interstep_cpu_ms=None if cur.interstep_ns is None else cur.interstep_ns / 1e6, gc_ms=d.gc_ms,
            ),
            gc_count=d.gc_count, batch_size=d.batch_size, samples=d.samples, tokens=d.tokens, flops=d.flops,
            peak_flops=self.peak_flops, profiling=d.profiling, attempt=r.attempt,
        ))
        if kernels is not None:
            out.append(KernelSummary(job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device,
                                    domains=r.domains, step=cur.step, attempt=r.attempt,
                                    **kernels.summary_fields()))

    def _drain_builder(self, timeout: float | None) -> bool:
        """Wait until every finished step was handed to the emitter."""
        if self._builder is None or self._builder_pid != os.getpid():
            return True
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: self._built >= self._queued or not self._builder_alive(), timeout)

    def _builder_alive(self) -> bool:
        return self._builder is not None and self._builder.is_alive()

    def _maybe_start_profile(self, idx: int) -> None:
        with self._lock:
            while self._requests and self._requests[0].step_last < idx:
                self._requests.popleft()
                self._ignored[PAST_STEPS] = self._ignored.get(PAST_STEPS, 0) + 1
            if not self._requests or self._requests[0].step_first > idx:
                return
            req = self._requests.popleft()
        if self._profiler_factory is None:
            return
        first = max(req.step_first, idx)
        req = ProfileRequest(command_id=req.command_id, step_first=first, step_last=req.step_last,
                             level=req.level, out_dir=req.out_dir)
        prof = self._profiler_factory(req)
        prof.start(idx)
        self._active = (req, prof)

    def _finish_profile(self, req: ProfileRequest, prof: ProfilerBackend) -> None:
        self._active = None
        result: ProfileResult = prof.stop()
        r = self.rank
        self._profiles += 1
        # emitted by the builder, after the profiled steps' own events (per-rank order on the wire)
        self._defer(lambda: self._emit_profile(req, result, r))

    def _emit_profile(self, req: ProfileRequest, result: ProfileResult, r: RankInfo) -> None:
        for step in range(req.step_first, req.step_last + 1):
            kernels = result.kernels.get(step, [])
            self.emit(KernelBatch(job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device,
                                  domains=r.domains, step=step, kernels=kernels, dropped=result.dropped.get(step, 0)))
        self.emit(ProfileReady(job=r.job, rank=r.rank, host=r.host, format=result.format, uri=str(result.uri),
                               step_first=req.step_first, step_last=req.step_last, ts_ns=time.time_ns(),
                               bytes=result.nbytes, command_id=req.command_id))

    def _install_gc(self) -> None:
        ref = weakref.ref(self)

        def on_gc(phase: str, info: dict[str, int]) -> None:
            hook = ref()
            if hook is None:
                return
            if phase == "start":
                hook._gc_t0 = time.perf_counter_ns()
            elif hook._gc_t0:
                hook._gc_ms += (time.perf_counter_ns() - hook._gc_t0) / 1e6
                hook._gc_n += 1
                hook._gc_t0 = 0

        self._gc_cb = on_gc
        gc.callbacks.append(on_gc)
        self._track_gc = True

    def _remove_gc(self) -> None:
        cb = getattr(self, "_gc_cb", None)
        if cb is not None and cb in gc.callbacks:
            gc.callbacks.remove(cb)


class _StepContext:
    __slots__ = ("_hook", "_step", "_totals")

    def __init__(self, hook: RankHook, step: int | None, totals: dict[str, Any]) -> None:
        self._hook = hook
        self._step = step
        self._totals = totals

    def __enter__(self) -> RankHook:
        self._hook.step_begin(self._step)
        return self._hook

    def __exit__(self, *exc: object) -> None:
        self._hook.step_end(**self._totals)


class _PhaseContext:
    __slots__ = ("_hook", "_name")

    def __init__(self, hook: RankHook, name: str) -> None:
        self._hook = hook
        self._name = name

    def __enter__(self) -> None:
        self._hook.phase_begin(self._name)

    def __exit__(self, *exc: object) -> None:
        self._hook.phase_end(self._name)


class _TimedIterator(Iterator[T]):
    __slots__ = ("_hook", "_it")

    def __init__(self, hook: RankHook, it: Iterator[T]) -> None:
        self._hook = hook
        self._it = it

    def __iter__(self) -> _TimedIterator[T]:
        return self

    def __next__(self) -> T:
        t = time.perf_counter_ns()
        try:
            return next(self._it)
        finally:
            try:
                hook = self._hook
                end = hook._data_end_pc = time.perf_counter_ns()
                hook._data_ms((end - t) / 1e6)
            except Exception:
                self._hook._errors += 1

    def __len__(self) -> int:
        return len(self._it)  # type: ignore[arg-type]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120] or "profile"


def _register_lifecycle(hook: RankHook) -> None:
    """atexit close and fork reset through weak references: a dropped hook is not kept alive."""
    ref = weakref.ref(hook)

    def at_exit() -> None:
        h = ref()
        if h is not None:
            h.close()

    def after_fork() -> None:
        h = ref()
        if h is not None:
            h._after_fork()

    atexit.register(at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=after_fork)


__all__ = ["PHASES", "Emitter", "HookStats", "RankHook", "RankInfo"]
