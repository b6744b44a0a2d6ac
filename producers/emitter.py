"""Fire-and-forget event emission for the training loop: the emitter's public side.

`BackgroundEmitter.emit` is called on the training thread, so it must cost microseconds and
never block or raise: it encodes the event, picks topic and key (producers/routing.py), and
appends it to a bounded in-memory queue. Anything that cannot be accepted is dropped and counted
with a reason, because losing telemetry is always better than slowing training. A daemon worker
thread (producers/delivery_worker.py) batches the queue and hands batches to an `Exporter`. When
the exporter fails (Kafka down) batches go to a bounded on-disk spool and the exporter is retried
with backoff; once it works again the spool is replayed in order before any newer event, then
deleted.

Every count and decision (a batch due, backoff, spool or not, a stall, what a failure leaves to
resend) belongs to the pure state machine in producers/delivery.py; this module owns its lock
and the entry points (four ways in: `emit`, `emit_batch`, `emit_records[_seq]`, and `flush` /
`close` / `wait_*` for shutdown code and tests).

With `pack=True` (contract 1.2, Settings.emit_pack) each export round's events of one (topic,
key) go out as one JSON-array record (producers/packing.py): the queue, the spool, the counters
and the drops stay per event, only what is handed to the exporter is packed.

Shape borrowed from OpenTelemetry's batch processor (bounded queue, daemon worker woken by size
or interval, exporter protocol), with counted drops, a spool, and no sleeps on shutdown.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from producers.delivery import (
    CLOSED,
    DEFAULT_STALL_S,
    ENCODE_ERROR,
    EXPORT_FAILED,
    FORKED,
    INTERNAL_ERROR,
    QUEUE_FULL,
    SPOOL_FULL,
    TOO_LARGE,
    UNROUTABLE,
    Delivery,
    EmitterStats,
)
from producers.delivery_worker import DeliveryWorker
from producers.exporter import Exporter, OutRecord
from producers.packing import MAX_PACKED_BYTES, MAX_PACKED_EVENTS
from producers.routing import route, to_record
from producers.spool import open_spool
from schemas import MAX_EVENT_BYTES, Event, Topics

DEFAULT_MAX_SPOOL_BYTES = 256 * 1024 * 1024
# close(timeout) keeps this much of its timeout (at most a quarter of it) for aborting a stalled export
# and spooling what it held.
CLOSE_GRACE_S = 1.0


class BackgroundEmitter:
    """Non-blocking emitter: bounded queue, daemon export thread, disk spool, counted drops.

    Spool: `spool_dir` is used as given (one writer: a busy one is refused); `spool_root` claims
    `<spool_root>/<name>` (0700), or `<name>-<pid>` when another live process holds it. Entry points
    pass `Settings.hook_spool_dir` ($STEPLENS_HOME/spool) as the root; with neither there is no spool.
    """

    def __init__(
        self,
        exporter: Exporter,
        topics: Topics | None = None,
        *,
        max_queue: int = 10_000,
        batch_size: int = 512,
        flush_interval_s: float = 0.2,
        spool_dir: Path | None = None,
        spool_root: Path | None = None,
        max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
        retry_backoff_s: float = 0.5,
        retry_backoff_max_s: float = 30.0,
        max_event_bytes: int = MAX_EVENT_BYTES,
        name: str = "steplens-emitter",
        pack: bool = False,
        max_packed_events: int = MAX_PACKED_EVENTS,
        max_packed_bytes: int = MAX_PACKED_BYTES,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        if max_queue < 1 or batch_size < 1:  # before any spool is claimed
            raise ValueError("max_queue and batch_size must be >= 1")
        self._topics = topics or Topics()
        self._max_event_bytes = max_event_bytes
        self._pack = pack
        self._spool, spool_lock = open_spool(name, spool_dir, spool_root, max_spool_bytes)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)  # worker wake-ups and progress notifications
        # every count and decision; read and changed under self._lock only
        self._state = Delivery(
            max_queue=max_queue, batch_size=batch_size, flush_interval_s=flush_interval_s,
            retry_backoff_s=retry_backoff_s, retry_backoff_max_s=retry_backoff_max_s, stall_s=stall_s,
            has_spool=self._spool is not None,
            spool_pending=self._spool.pending if self._spool else 0,
            spool_bytes=self._spool.bytes if self._spool else 0,
        )
        self._pid = os.getpid()
        t = self._topics
        self._worker = DeliveryWorker(
            exporter, self._state, self._cv, self._spool, spool_lock, name=name, pack=pack,
            packable=frozenset((t.steps, t.kernel_summaries, t.device, t.kernels)),
            max_packed=(max_packed_events, max_packed_bytes),
        )
        self._worker.start()
        _register_fork_guard(self)

    @property
    def spool_dir(self) -> Path | None:
        return self._spool.directory if self._spool is not None else None

    # --- training-thread side -----------------------------------------------------------
    def emit(self, event: Event) -> bool:
        """Queue one event for export; True if accepted. Never blocks on I/O, never raises."""
        try:
            return self._emit(event)
        except Exception:  # the training loop must never see our bugs
            self._count_drop(INTERNAL_ERROR)
            return False

    def _emit(self, event: Event) -> bool:
        if self._pid != os.getpid():
            return self._count_drop(FORKED)
        rec = self._record(event)
        if rec is None:
            return False
        with self._lock:
            state = self._state
            ok = state.enqueue(rec, time.monotonic())
            if ok and state.wakes_worker():
                self._cv.notify_all()
        return ok

    def emit_batch(self, events: Sequence[Event], *, send_now: bool = False) -> int:
        """Queue several events under one lock and at most one worker wake-up; how many were accepted.

        `send_now`: the queue is due at once instead of after flush_interval_s (a producer that
        already batched on its own cadence, like the rank hook's builder, then costs the worker one
        wake-up per batch). Never blocks on I/O, never raises.
        """
        try:
            if self._pid != os.getpid():
                for _ in events:
                    self._count_drop(FORKED)
                return 0
            recs = [r for r in map(self._record, events) if r is not None]
            with self._lock:
                accepted = self._state.enqueue_all(recs, time.monotonic(), send_now=send_now)
                if accepted:
                    self._cv.notify_all()
            return accepted
        except Exception:
            self._count_drop(INTERNAL_ERROR)
            return 0

    def emit_records(self, records: Sequence[OutRecord], *, send_now: bool = False) -> int:
        """Queue already encoded, routed records (a node relay forwarding ranks' records); how many.

        Accepts the longest prefix that fits the queue and returns its length: the caller keeps the
        rest and offers it again later, so order holds and refused records are not counted as drops
        here (the sender still has them). Never blocks on I/O, never raises.
        """
        return self.emit_records_seq(records, send_now=send_now)[0]

    def emit_records_seq(self, records: Sequence[OutRecord], *, send_now: bool = False) -> tuple[int, int]:
        """emit_records, and the queue number just past the accepted records (for `wait_settled`)."""
        try:
            if self._pid != os.getpid():
                return 0, 0
            with self._lock:
                n, seq, wake = self._state.accept_prefix(records, time.monotonic(), send_now=send_now)
                if wake:
                    self._cv.notify_all()
                return n, seq
        except Exception:
            self._count_drop(INTERNAL_ERROR)
            return 0, 0

    def wait_settled(self, seq: int, timeout: float | None) -> bool:
        """Block the caller until every record queued before number `seq` (from emit_records_seq) is
        exported, spooled or dropped (counted): then only the spool, not this process's memory, holds
        it. For a node relay acknowledging ranks' records; never for the training loop."""
        state = self._state
        with self._cv:
            self._cv.wait_for(lambda: state.settled() >= seq or state.worker_done, timeout)
            return state.settled() >= seq

    def _record(self, event: Event) -> OutRecord | None:
        """The encoded, routed record of `event`, or None (the reason counted as a drop)."""
        rec = to_record(event, self._topics, pack=self._pack, max_event_bytes=self._max_event_bytes)
        if isinstance(rec, str):
            self._count_drop(rec)
            return None
        return rec

    def _count_drop(self, reason: str) -> bool:
        with self._lock:
            self._state.refuse(reason)
        return False

    @property
    def max_queue(self) -> int:
        return self._state.max_queue

    def stats(self) -> EmitterStats:
        with self._lock:
            return self._state.stats()

    def wait_until(self, predicate: Callable[[EmitterStats], bool], timeout: float | None) -> bool:
        """Block the caller until `predicate(stats)` holds (re-checked on every worker step).

        For tests, load generators and shutdown code, never for the training loop.
        """
        with self._cv:
            return self._cv.wait_for(lambda: predicate(self._state.stats()), timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending (queue, in-flight batch, spool); False on timeout.

        While a flush waits, partial batches are sent at once, and a failed exporter is retried
        right away once (later retries keep the backoff). With other threads still emitting,
        "nothing pending" may only come at the timeout; this is for shutdown and tests.
        """
        state = self._state
        with self._cv:
            if state.worker_done:
                return state.pending() == 0
            state.request_flush()  # partial batches are due while someone is flushing
            self._cv.notify_all()
            try:
                self._cv.wait_for(lambda: state.pending() == 0 or state.worker_done, timeout)
                return state.pending() == 0
            finally:
                state.end_flush()

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush (bounded by `timeout`), stop the worker and close the exporter.

        What could not be exported stays in the spool for the next run (or is dropped as
        `closed` without one). An export still waiting for the broker is aborted when the flush
        gives up, leaving a grace (CLOSE_GRACE_S, at most a quarter of `timeout`) to spool what it
        held; with `timeout=None` nothing is aborted (close waits for the broker). True when
        everything was exported and the worker stopped.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        grace = 0.0 if timeout is None else min(CLOSE_GRACE_S, timeout / 4)
        flushed = self.flush(None if timeout is None else timeout - grace)
        with self._cv:
            self._state.begin_close(float("inf") if deadline is None else deadline - grace)
            self._cv.notify_all()
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        self._worker.join(remaining)
        return flushed and not self._worker.is_alive()

    def __enter__(self) -> BackgroundEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _register_fork_guard(emitter: BackgroundEmitter) -> None:
    """In a forked child the worker thread does not exist and the lock may be held: reset it.

    The child's emits are then dropped as `forked` (its pid differs) instead of deadlocking.
    """
    if not hasattr(os, "register_at_fork"):
        return
    ref: weakref.ReferenceType[BackgroundEmitter] = weakref.ref(emitter)

    def reinit() -> None:
        em = ref()
        if em is not None:
            em._lock = threading.Lock()
            em._cv = threading.Condition(em._lock)
            em._state.reset_after_fork()

    os.register_at_fork(after_in_child=reinit)


# The drop reasons, EmitterStats and route live in producers/delivery.py and producers/routing.py;
# they are named here too, where the emitter's users have always found them.
__all__ = [
    "CLOSED", "ENCODE_ERROR", "EXPORT_FAILED", "FORKED", "INTERNAL_ERROR", "QUEUE_FULL", "SPOOL_FULL",
    "TOO_LARGE", "UNROUTABLE", "BackgroundEmitter", "EmitterStats", "route",
]
