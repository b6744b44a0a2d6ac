"""The framework-agnostic rank hook: the training thread's entry points and the hook's lifecycle.

Everything here runs on the training thread, so every public entry point is guarded: an
exception inside the hook is counted (`HookStats.errors`) and swallowed, never raised into the
training loop. The guard is an inline `try`/`except` in each entry point, not a wrapper: a
wrapper would cost the training thread one more call per hook call. Events leave through an
emitter whose `emit` only appends to a bounded queue (producers/emitter.py); the hook itself
does no I/O on the training thread, except when a control command asked for detailed profiling
of a step range (then the profiler dump is written when the last profiled step ends, which is
the price of asking for it).

The hook's other ideas each have a module: identity.py (who the rank is), steps.py (a step as
the training thread records it, and its StepEvent), aggregate.py (kernel and collective records
into the kernel summary), builder.py (the thread that builds events off the training thread),
commands.py (control commands and the profiling they ask for), gc_timing.py (GC pauses),
contexts.py (the `with` and loader spellings), memory.py (the device allocator's per-step peak and
reserved bytes, contract 1.5).

Fork safety: a forked child (a DataLoader worker, a launcher) must not share the parent's
emitter thread, so after a fork the hook forgets its emitter and the child builds a fresh one
(with its own thread) on its first emit; children that never emit never start a thread.
At interpreter exit the hook emits nothing more, flushes the emitter (bounded) and closes it.
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from producers.hook.aggregate import (
    COLL,
    KERNEL,
    MAX_RAW_RECORDS_PER_STEP,
    OTHER,
    AggSnapshot,
    KernelAggregator,
    add_raw,
    kernel_summary,
)
from producers.hook.builder import BUILD_INTERVAL_S, Builder
from producers.hook.commands import ProfileCommands, profile_events
from producers.hook.contexts import PhaseContext, StepContext, TimedIterator
from producers.hook.gc_timing import GcTimer
from producers.hook.identity import RankInfo, launcher_attempt
from producers.hook.memory import AllocatorStats
from producers.hook.profiling import ProfilerBackend, ProfileRequest, ProfileResult
from producers.hook.steps import TIMED_PHASES, DoneStep, StepState, phase_totals, step_event
from schemas import ControlCommand, Domain, Event, JobEvent, ModelShape
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory

log = logging.getLogger(__name__)

T = TypeVar("T")


class Emitter(Protocol):
    """What the hook needs from producers.emitter.BackgroundEmitter."""

    def emit(self, event: Event) -> bool: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self, timeout: float | None = 10.0) -> bool: ...


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


class RankHook:
    """Per-rank step telemetry; one per training process.

    `emitter_factory` builds the emitter lazily (first emit) and again in a forked child.
    `profiler_factory` builds the detailed profiler a control command switches on (None: the
    hook ignores profiling commands, counted as `no_profiler`). `build_interval_s`: how often the
    builder thread turns finished steps into events (the training thread never wakes it).
    `memory`: the device allocator's statistics (producers/hook/memory.py; the framework glue sets it
    where a CUDA/NPU device is in use), read and reset at every step end; None: the step events carry
    no memory fields. `model_shape`: the model's shape for the job's `start` event (`job_start`).
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
        memory: AllocatorStats | None = None,
        model_shape: ModelShape | None = None,
    ) -> None:
        self.rank = rank
        self.memory = memory
        self.model_shape = model_shape
        self._memory_reset = False  # the peak was reset once before the first step
        self._emitter_factory = emitter_factory
        self._emitter: Emitter | None = None
        self.profile_root = profile_root or Path(tempfile.gettempdir()) / "steplens-profiles"
        self.peak_flops = peak_flops
        self._close_timeout = close_timeout_s
        self._pid = os.getpid()
        self._closed = False
        self._next_step = 0
        self._cur: StepState | None = None
        self._last_end_pc: int | None = None
        self._agg = KernelAggregator()  # builder thread only
        self._kraw: list[tuple[Any, ...]] = []  # the open step's raw kernel records (training thread)
        self._kraw_dropped = 0
        self._build_interval = build_interval_s
        self._gc = GcTimer()
        # counters (training thread only; commands count under their own lock)
        self._steps = 0
        self._events = 0
        self._errors = 0
        self._overhead = 0
        self._calls = 0
        self._profiles = 0
        self._em_lock = threading.Lock()
        self._commands = ProfileCommands(profiler_factory)
        self._followers: list[Any] = []
        self._builder: Builder | None = None
        if track_gc:
            self._gc.install()
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

    def step(self, step: int | None = None, **totals: Any) -> StepContext:
        """`with hook.step():` around one training step; `totals` go to step_end (samples=, tokens=...)."""
        return StepContext(self, step, totals)

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

    def phase(self, name: str) -> PhaseContext:
        """`with hook.phase("forward"):` adds the block's wall time to that phase of the current step."""
        return PhaseContext(self, name)

    def add_phase_ms(self, name: str, ms: float) -> None:
        """Add a measured duration to a phase of the current step (e.g. from a framework callback)."""
        try:
            cur = self._cur
            if cur is not None and ms >= 0:
                cur.phases.append((name, ms))
        except Exception:
            self._errors += 1

    # --- job lifecycle ---------------------------------------------------------------------------
    def job_start(self, *, parallel: dict[str, int] | None = None, model: str | None = None,
                  model_shape: ModelShape | None = None, kernel_summaries: bool | None = None) -> bool:
        """Emit the job's `start` event (one rank does, usually rank 0): the world, the parallel degrees
        (default: this rank's domain sizes), the model's name and shape (default: the hook's
        `model_shape`), the attempt. False when it could not be handed to the emitter; never raises."""
        try:
            r = self.rank
            sizes = {name: d.size for name, d in r.domains.items()} if parallel is None else dict(parallel)
            return self.emit(JobEvent(job=r.job, phase="start", world=r.world, ts_ns=time.time_ns(), parallel=sizes,
                                      model=model, kernel_summaries=kernel_summaries, attempt=r.attempt,
                                      model_shape=self.model_shape if model_shape is None else model_shape))
        except Exception:
            self._errors += 1
            return False

    def job_end(self, last_step: int | None = None) -> bool:
        """Emit the job's `end` event (`last_step`: default the last step this rank ended); never raises."""
        try:
            r = self.rank
            last = self._next_step - 1 if last_step is None else last_step
            return self.emit(JobEvent(job=r.job, phase="end", world=r.world, ts_ns=time.time_ns(),
                                      last_step=last if last >= 0 else None, attempt=r.attempt,
                                      parallel={name: d.size for name, d in r.domains.items()}))
        except Exception:
            self._errors += 1
            return False

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
            kraw.append((COLL, op, dur_ns, nbytes, domain, group_size, launch_us))
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
            kraw.append((KERNEL, key, cat, dur_ns, metric, shape, flops, nbytes, direction, launch_us, monitored)
                        if monitored else (OTHER, dur_ns))
        else:
            self._kraw_dropped += 1

    # --- data loading ----------------------------------------------------------------------
    def wrap_loader(self, iterable: Iterable[T]) -> Iterator[T]:
        """Iterate `iterable`, adding each `__next__`'s wall time to the data phase (D1).

        A batch fetched between steps (the usual `for batch in loader:` shape) is credited to
        the step that follows.
        """
        return TimedIterator(self, iter(iterable))

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
        return self._commands.submit(cmd, self.rank, self._next_step, self.profile_root)

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
        self._gc.remove()
        limit = self._close_timeout if timeout is None else timeout
        builder = self._builder
        if builder is not None and builder.pid == os.getpid():
            builder.stop(limit)
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
        accepted, ignored = self._commands.counts()
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
        self._em_lock = threading.Lock()
        self._commands.after_fork()
        self._followers = []
        self._builder = None  # the parent's builder thread does not exist here

    def _step_begin(self, step: int | None, t: int) -> None:
        idx = self._next_step if step is None else step
        last = self._last_end_pc
        cur = self._cur = StepState(idx, time.time_ns(), t, None if last is None else t - last)
        self._kraw = cur.kernels
        if self._pending_data_ms:
            cur.phases.append(("data", self._pending_data_ms))
            self._pending_data_ms = 0.0
        gc_timer = self._gc
        gc_timer.ms = 0.0
        gc_timer.n = 0
        if self.memory is not None and not self._memory_reset:
            self._memory_reset = True
            self._read_memory()  # the peak so far (model load, warm-up) is no step's
        commands = self._commands
        if commands.requests and commands.active is None:
            commands.start_due(idx)

    def _step_end(self, samples: int | None, tokens: int | None, batch_size: int | None,
                  flops: float | None, t: int) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        self._kraw = []  # records between steps land here and are dropped at the next begin
        gc_timer = self._gc
        tracked = gc_timer.installed
        commands = self._commands
        peak, reserved = self._read_memory() if self.memory is not None else (None, None)
        self._defer(DoneStep(cur, cur.start_ns + (t - cur.t0), samples, tokens, batch_size, flops,
                             gc_timer.ms if tracked else None, gc_timer.n if tracked else None,
                             commands.active is not None, self.rank, peak, reserved,
                             self.memory.capacity if self.memory is not None and peak is not None else None))
        self._steps += 1
        self._next_step = cur.step + 1
        if commands.active is not None:
            finished = commands.step_end(cur.step)
            if finished is not None:
                self._finish_profile(*finished)
        self._last_end_pc = time.perf_counter_ns()

    def _read_memory(self) -> tuple[int | None, int | None]:
        """The allocator's (peak, reserved) since the last read, the peak reset; (None, None) when it
        fails (counted: a step event without memory fields, never an exception in the training loop)."""
        memory = self.memory
        if memory is None:
            return None, None
        try:
            return memory.read()
        except Exception:
            self._errors += 1
            return None, None

    # --- event building, off the training thread -----------------------------------------------
    def _defer(self, done: DoneStep | Callable[[], None]) -> None:
        """Queue a finished step (or a job for the builder); the builder thread turns it into events.

        The append is all the training thread pays (producers/hook/builder.py says why).
        """
        if self._closed:
            return
        builder = self._builder
        if builder is None:
            builder = self._builder = Builder(self._build, self._emit_round, self._count_error, self._build_interval)
        builder.queued += 1
        builder.done.append(done)

    def _count_error(self) -> None:
        self._errors += 1

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
        add_raw(agg, records)
        dropped, self._kraw_dropped = self._kraw_dropped, 0
        agg.dropped += dropped
        return agg.take()

    def _build(self, d: DoneStep, out: list[Event]) -> None:
        ph = phase_totals(d.state)
        try:
            kernels = self._aggregate(d.state.kernels)
        except Exception:  # a bad record costs the summary, never the step event
            self._errors += 1
            kernels = None
        out.append(step_event(d, ph, self.peak_flops))
        if kernels is not None:
            out.append(kernel_summary(d.rank, d.state.step, kernels))

    def _drain_builder(self, timeout: float | None) -> bool:
        """Wait until every finished step was handed to the emitter."""
        builder = self._builder
        if builder is None or builder.pid != os.getpid():
            return True
        return builder.drain(timeout)

    def _finish_profile(self, req: ProfileRequest, result: ProfileResult) -> None:
        r = self.rank
        self._profiles += 1
        # emitted by the builder, after the profiled steps' own events (per-rank order on the wire)
        self._defer(lambda: self._emit_profile(req, result, r))

    def _emit_profile(self, req: ProfileRequest, result: ProfileResult, r: RankInfo) -> None:
        for event in profile_events(req, result, r):
            self.emit(event)


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


# RankInfo and launcher_attempt live in producers/hook/identity.py, TIMED_PHASES in steps.py; named here
# too, where the hook's users have always found them.
__all__ = ["TIMED_PHASES", "Emitter", "HookStats", "RankHook", "RankInfo", "launcher_attempt"]
