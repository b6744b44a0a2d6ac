"""Fire-and-forget event emission for the training loop.

`BackgroundEmitter.emit` is called on the training thread, so it must cost microseconds and
never block or raise: it encodes the event, picks topic and key, and appends it to a bounded
in-memory queue. Anything that cannot be accepted is dropped and counted with a reason, because
losing telemetry is always better than slowing training. A daemon worker thread batches the
queue and hands batches to an `Exporter`. When the exporter fails (Kafka down) batches go to a
bounded on-disk spool and the exporter is retried with backoff; once it works again the spool is
replayed in order before any newer event, then deleted.

With `pack=True` (contract 1.2, Settings.emit_pack) each export round's events of one (topic,
key) go out as one JSON-array record (producers/packing.py): the queue, the spool, the counters
and the drops stay per event, only what is handed to the exporter is packed.

Shape borrowed from OpenTelemetry's batch processor (bounded queue, daemon worker woken by size
or interval, exporter protocol), with counted drops, a spool, and no sleeps on shutdown.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from producers.exporter import Abortable, Exporter, ExportError, OutRecord
from producers.packing import MAX_PACKED_BYTES, MAX_PACKED_EVENTS, pack_records
from producers.spool import Spool, claim_directory
from schemas import (
    MAX_EVENT_BYTES,
    DeviceSample,
    Event,
    JobEvent,
    KernelBatch,
    KernelSummary,
    ProfileReady,
    StepEvent,
    Topics,
    encode,
)
from schemas.topics import job_key, rank_key

log = logging.getLogger(__name__)

# Drop reasons (keys of EmitterStats.dropped).
ENCODE_ERROR = "encode_error"      # schemas.encode raised (not a contract event, bad value)
TOO_LARGE = "too_large"            # encoded event above MAX_EVENT_BYTES
UNROUTABLE = "unroutable"          # an event type producers do not send
QUEUE_FULL = "queue_full"          # the in-memory queue is at max_queue
SPOOL_FULL = "spool_full"          # export failed and the spool is at max_spool_bytes
EXPORT_FAILED = "export_failed"    # export failed and there is no spool (or writing it failed)
CLOSED = "closed"                  # emit after close, or left in the queue when close gave up
FORKED = "forked"                  # emit in a forked child (e.g. a DataLoader worker)
INTERNAL_ERROR = "internal_error"  # a bug in the emitter itself; still never raised to training

DEFAULT_MAX_SPOOL_BYTES = 256 * 1024 * 1024
# While an export is in flight the worker sleeps until it ends or the queue reaches its high-water mark
# (both wake it); this bound is only a safety net. Polling instead (every 50 ms) cost a rank's helper
# threads ~10 us per step once exports wait for a relay's durable ack (~0.2 s each).
OVERFLOW_POLL_S = 1.0
# An export still waiting after this long is stalled (a broker away, the exporter retrying in place):
# newer records then go to the spool as each batch comes due, where they survive the process, instead
# of waiting in memory for the queue's high-water mark.
DEFAULT_STALL_S = 2.0
# close(timeout) keeps this much of its timeout (at most a quarter of it) for aborting a stalled export
# and spooling what it held.
CLOSE_GRACE_S = 1.0


def claim_default_spool(name: str, root: Path) -> tuple[Path, int] | None:
    """`<root>/<name>`, or `<root>/<name>-<pid>` when another live process holds it; with its lock fd.

    The caller passes the root (entry points: `Settings.hook_spool_dir`, $STEPLENS_HOME/spool): a
    library reads no settings of its own.
    """
    for directory in (root / name, root / f"{name}-{os.getpid()}"):
        fd = claim_directory(directory)
        if fd is not None:
            return directory, fd
    return None


@dataclass(frozen=True, slots=True)
class EmitterStats:
    """Counters since the emitter started.

    Every count is in events (one emit = one event), packed or not.
    emitted: calls to emit. exported: events the exporter accepted (replayed ones included).
    spooled: events written to the spool; replayed: spooled events exported later.
    queued / spool_pending: events waiting now. At rest,
    emitted == exported + sum(dropped) + queued + spool_pending + in_flight.
    records_sent: Kafka records the exporter accepted (fewer than events when packing).
    """

    emitted: int = 0
    exported: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    spooled: int = 0
    replayed: int = 0
    queued: int = 0
    in_flight: int = 0
    spool_pending: int = 0
    spool_bytes: int = 0
    export_failures: int = 0
    healthy: bool = True
    records_sent: int = 0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def pending(self) -> int:
        """Accepted records not yet exported nor dropped."""
        return self.queued + self.in_flight + self.spool_pending


def route(event: Event, topics: Topics, *, pack: bool = False) -> tuple[str, bytes | None] | None:
    """Topic and key for an event, or None for types producers do not send.

    Per-rank events are keyed by rank so one rank's events stay ordered on one partition.
    Device samples are keyed per device, or per host when packing (one record per node per tick).
    """
    if isinstance(event, StepEvent):
        return topics.steps, rank_key(event.job, event.rank)
    if isinstance(event, KernelSummary):
        return topics.kernel_summaries, rank_key(event.job, event.rank)
    if isinstance(event, KernelBatch):
        return topics.kernels, rank_key(event.job, event.rank)
    if isinstance(event, DeviceSample):
        return topics.device, event.host.encode() if pack else f"{event.host}/{event.device}".encode()
    if isinstance(event, JobEvent):
        return topics.jobs, job_key(event.job)
    if isinstance(event, ProfileReady):
        return topics.profiles, rank_key(event.job, event.rank)
    return None


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
        if max_queue < 1 or batch_size < 1:
            raise ValueError("max_queue and batch_size must be >= 1")
        self._exporter = exporter
        self._topics = topics or Topics()
        self._max_queue = max_queue
        self._batch_size = batch_size
        self._interval = flush_interval_s
        self._backoff_min = retry_backoff_s
        self._stall_s = stall_s
        self._backoff_max = retry_backoff_max_s
        self._max_event_bytes = max_event_bytes
        self._pack = pack
        self._max_packed = (max_packed_events, max_packed_bytes)
        t = self._topics
        self._packable = frozenset((t.steps, t.kernel_summaries, t.device, t.kernels))
        self._spool: Spool | None = None
        self._spool_lock: int | None = None
        if spool_dir is not None and spool_root is not None:
            raise ValueError("give spool_dir or spool_root, not both")
        if spool_root is not None:
            spool_dir = self._default_spool(name, spool_root)
        elif spool_dir is not None:
            spool_dir = self._explicit_spool(spool_dir)
        if spool_dir is not None:
            try:
                self._spool = Spool(spool_dir, max_spool_bytes)
            except OSError:  # an unusable spool directory must not stop training: run without one
                log.warning("steplens spool at %s unusable; failed exports will be dropped", spool_dir,
                            exc_info=True)

        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)  # worker wake-ups and progress notifications
        self._queue: deque[OutRecord] = deque()
        self._emitted = 0
        self._exported = 0
        self._spooled = 0
        self._replayed = 0
        self._failures = 0
        self._records_sent = 0
        self._in_flight = 0
        self._dropped: Counter[str] = Counter()
        self._spool_pending = self._spool.pending if self._spool else 0
        self._spool_bytes = self._spool.bytes if self._spool else 0
        self._healthy = True
        self._backoff = retry_backoff_s
        self._retry_at = 0.0
        self._flush_requests = 0
        self._oldest_at = 0.0  # when the oldest queued record arrived
        # Settling (wait_settled): queued records are numbered in queue order; `_popped` records have left
        # the queue, and `_outstanding` holds the first number of each popped run not yet exported,
        # spooled or dropped (an export in flight, a drain to the spool).
        self._enqueued = 0
        self._popped = 0
        self._outstanding: list[int] = []
        self._closing = False
        self._abort_at = float("inf")  # closing: when a stalled export is aborted (Abortable exporters)
        # Leading events of the fresh export in flight already written to the spool's head (worker only):
        # see _hold_in_spool.
        self._tentative = 0
        self._worker_done = False
        self._pid = os.getpid()

        # Exports run on their own thread, so the worker can move queue overflow to the spool
        # while an export hangs (a broker timing out) instead of dropping it as queue_full.
        self._export_pool = _ExportThread(self._exporter, f"{name}-export")
        self._high_water = max(1, min(max_queue, max(batch_size, max_queue // 2)))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _register_fork_guard(self)

    def _default_spool(self, name: str, root: Path) -> Path | None:
        try:
            claimed = claim_default_spool(name, root)
        except Exception:  # no usable state directory: run without a spool, as documented
            log.warning("steplens default spool unusable; failed exports will be dropped", exc_info=True)
            return None
        if claimed is None:
            log.warning("steplens spool directories for %r are busy; failed exports will be dropped", name)
            return None
        self._spool_lock = claimed[1]
        return claimed[0]

    def _explicit_spool(self, directory: Path) -> Path | None:
        """The given spool directory, once this emitter is its one writer: two emitters on one spool
        read and delete each other's segments (two soak jobs given one directory lost events:
        "spool unreadable"). A busy one is refused loudly and the emitter runs without a spool."""
        try:
            fd = claim_directory(Path(directory))
        except OSError:
            log.warning("steplens spool at %s unusable; failed exports will be dropped", directory, exc_info=True)
            return None
        if fd is None:
            log.error("steplens spool at %s is in use by another emitter; this one runs without a spool "
                      "(failed exports will be dropped): give each emitter its own spool_dir", directory)
            return None
        self._spool_lock = fd
        return Path(directory)

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
            ok = self._enqueue_locked(rec)
            n = len(self._queue)
            if ok and (n == 1 or n == self._batch_size or n == self._high_water):
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
            accepted = 0
            with self._lock:
                for rec in recs:
                    accepted += self._enqueue_locked(rec)
                if accepted:
                    if send_now:
                        self._oldest_at = float("-inf")
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
                if self._closing:
                    return 0, self._enqueued
                n = max(min(len(records), self._max_queue - len(self._queue)), 0)
                if n == 0:
                    return 0, self._enqueued
                if not self._queue:
                    self._oldest_at = time.monotonic()
                self._queue.extend(records[:n])
                self._enqueued += n
                self._emitted += n
                if send_now:
                    self._oldest_at = float("-inf")
                if send_now or len(self._queue) == n or len(self._queue) >= self._batch_size:
                    self._cv.notify_all()
                return n, self._enqueued
        except Exception:
            self._count_drop(INTERNAL_ERROR)
            return 0, 0

    def wait_settled(self, seq: int, timeout: float | None) -> bool:
        """Block the caller until every record queued before number `seq` (from emit_records_seq) is
        exported, spooled or dropped (counted): then only the spool, not this process's memory, holds
        it. For a node relay acknowledging ranks' records; never for the training loop."""
        with self._cv:
            self._cv.wait_for(lambda: self._settled_locked() >= seq or self._worker_done, timeout)
            return self._settled_locked() >= seq

    def _settled_locked(self) -> int:
        return min(self._outstanding) if self._outstanding else self._popped

    def _take_locked(self, n: int) -> int:
        """`n` records leave the queue, not settled yet: the token `_settle` takes once they are."""
        start = self._popped
        self._popped += n
        self._outstanding.append(start)
        return start

    def _settle(self, token: int) -> None:
        with self._cv:
            self._outstanding.remove(token)
            self._cv.notify_all()

    def _record(self, event: Event) -> OutRecord | None:
        """The encoded, routed record of `event`, or None (the reason counted as a drop)."""
        try:
            value = encode(event)
        except Exception:
            self._count_drop(ENCODE_ERROR)
            return None
        if len(value) > self._max_event_bytes:
            self._count_drop(TOO_LARGE)
            return None
        dest = route(event, self._topics, pack=self._pack)
        if dest is None:
            self._count_drop(UNROUTABLE)
            return None
        return OutRecord(dest[0], dest[1], value)

    def _enqueue_locked(self, rec: OutRecord) -> bool:
        self._emitted += 1
        if self._closing:
            self._dropped[CLOSED] += 1
            return False
        if len(self._queue) >= self._max_queue:
            self._dropped[QUEUE_FULL] += 1
            return False
        if not self._queue:
            self._oldest_at = time.monotonic()  # a record waits at most flush_interval_s
        self._queue.append(rec)
        self._enqueued += 1
        return True

    def _count_drop(self, reason: str) -> bool:
        with self._lock:
            self._emitted += 1
            self._dropped[reason] += 1
        return False

    @property
    def max_queue(self) -> int:
        return self._max_queue

    def stats(self) -> EmitterStats:
        with self._lock:
            return self._stats_locked()

    def _stats_locked(self) -> EmitterStats:
        return EmitterStats(
            emitted=self._emitted,
            exported=self._exported,
            dropped=dict(self._dropped),
            spooled=self._spooled,
            replayed=self._replayed,
            queued=len(self._queue),
            in_flight=self._in_flight,
            spool_pending=self._spool_pending,
            spool_bytes=self._spool_bytes,
            export_failures=self._failures,
            healthy=self._healthy,
            records_sent=self._records_sent,
        )

    def wait_until(self, predicate: Callable[[EmitterStats], bool], timeout: float | None) -> bool:
        """Block the caller until `predicate(stats)` holds (re-checked on every worker step).

        For tests, load generators and shutdown code, never for the training loop.
        """
        with self._cv:
            return self._cv.wait_for(lambda: predicate(self._stats_locked()), timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending (queue, in-flight batch, spool); False on timeout.

        While a flush waits, partial batches are sent at once, and a failed exporter is retried
        right away once (later retries keep the backoff). With other threads still emitting,
        "nothing pending" may only come at the timeout; this is for shutdown and tests.
        """
        with self._cv:
            if self._worker_done:
                return self._pending_locked() == 0
            self._flush_requests += 1  # partial batches are due while someone is flushing
            self._retry_at = 0.0
            self._cv.notify_all()
            try:
                self._cv.wait_for(lambda: self._pending_locked() == 0 or self._worker_done, timeout)
                return self._pending_locked() == 0
            finally:
                self._flush_requests = max(self._flush_requests - 1, 0)

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
            self._closing = True
            self._abort_at = float("inf") if deadline is None else deadline - grace
            self._cv.notify_all()
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        self._thread.join(remaining)
        return flushed and not self._thread.is_alive()

    def __enter__(self) -> BackgroundEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- worker side ----------------------------------------------------------------------
    def _pending_locked(self) -> int:
        return len(self._queue) + self._in_flight + self._spool_pending

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # a dead worker only loses telemetry
            log.exception("steplens emitter worker crashed; further events are dropped")
            with self._cv:
                self._closing = True
                self._dropped[INTERNAL_ERROR] += len(self._queue)
                self._queue.clear()
                self._popped, self._outstanding = self._enqueued, []
        finally:
            try:
                self._exporter.close()
            except Exception:
                log.debug("exporter close raised", exc_info=True)
            self._export_pool.shutdown()
            if self._spool_lock is not None:
                os.close(self._spool_lock)
                self._spool_lock = None
            with self._cv:
                self._worker_done = True
                self._in_flight = 0
                self._cv.notify_all()

    def _spooling_locked(self) -> bool:
        """Fresh records go to the spool while the exporter is down or older records wait there."""
        return self._spool is not None and (not self._healthy or self._spool_pending > 0)

    def _decide_locked(self, now: float) -> tuple[str | None, float]:
        """The worker's next action ("finish", "spool", "replay", "export") or None and when to look again."""
        if self._closing:
            return "finish", now
        urgent = self._flush_requests > 0
        next_batch_at = self._oldest_at + self._interval
        due = len(self._queue) >= self._batch_size or (bool(self._queue) and (now >= next_batch_at or urgent))
        can_export = now >= self._retry_at
        never = now + 3600.0
        if self._spooling_locked():
            if due:
                return "spool", now
            if self._spool_pending > 0 and can_export:
                return "replay", now
            wake = min(next_batch_at if self._queue else never, self._retry_at if self._spool_pending else never)
            return None, wake
        if due and can_export:
            return "export", now
        if not can_export:
            return None, self._retry_at  # keep buffering in the queue until the retry is due
        return None, next_batch_at if self._queue else never

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    now = time.monotonic()
                    action, wake_at = self._decide_locked(now)
                    if action is not None:
                        break
                    self._cv.wait(max(wake_at - now, 0.001))
                batch: list[OutRecord] = []
                token = -1
                if action in ("spool", "export"):
                    batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
                    token = self._take_locked(len(batch))
                    self._in_flight = len(batch)
                    self._oldest_at = time.monotonic()
            if action == "finish":
                self._finish()
                return
            if action == "export":
                self._export_fresh(batch)
                self._settle(token)
            else:
                if token >= 0:
                    if batch:
                        self._to_spool(batch)
                    self._settle(token)
                with self._cv:
                    replay = self._spool_pending > 0 and time.monotonic() >= self._retry_at
                if replay:
                    self._replay()
            with self._cv:
                self._cv.notify_all()

    def _packed(self, records: Sequence[OutRecord]) -> tuple[Sequence[OutRecord], dict[int, tuple[OutRecord, ...]]]:
        """What to hand the exporter for these events, and each packed record's events (by id)."""
        if not self._pack:
            return records, {}
        packed = pack_records(records, self._packable, max_events=self._max_packed[0],
                              max_bytes=self._max_packed[1])
        return [p.record for p in packed], {id(p.record): p.members for p in packed}

    @staticmethod
    def _per_event(exc: BaseException, members: dict[int, tuple[OutRecord, ...]]) -> BaseException:
        """An exporter's failure in terms of events: a failed packed record fails all its events."""
        if not members or not isinstance(exc, ExportError) or exc.failed is None:
            return exc
        failed: list[OutRecord] = []
        for rec in exc.failed:
            events = members.get(id(rec))
            if events is None:  # not one of ours (an exporter that copies): the whole batch failed
                return ExportError(str(exc))
            failed.extend(events)
        return ExportError(str(exc), failed=failed)

    def _export(self, records: Sequence[OutRecord], *, fresh: bool = False,
                packed: tuple[Sequence[OutRecord], dict[int, tuple[OutRecord, ...]]] | None = None) -> None:
        """Export (packed when on) on the export thread; meanwhile keep the queue from overflowing.

        While the export waits, queued records go to the spool when the queue reaches its high-water
        mark or, once the export has stalled (waited stall_s), as each batch comes due; a `fresh`
        export's own records go to the spool's head first (_hold_in_spool). Closing, a stalled
        export is aborted at `_abort_at` so that its records can be spooled. Raises what the
        exporter raised, its `failed` records given as events. `packed`: `_packed(records)`, when
        the caller already has it.
        """
        out, members = packed if packed is not None else self._packed(records)
        started = time.monotonic()
        future = self._export_pool.submit(out)
        future.add_done_callback(self._wake_worker)
        aborted = False
        while True:
            with self._cv:
                while not future.done():
                    now = time.monotonic()
                    if self._closing and not aborted and now >= self._abort_at:
                        break
                    if self._overflowing_locked() or self._stall_due_locked(now, started):
                        break
                    self._cv.wait(self._export_wait_locked(now, started, aborted))
                done = future.done()
                abort = not done and self._closing and not aborted
            if abort:
                aborted = True
                if isinstance(self._exporter, Abortable):
                    self._exporter.abort()
                continue
            if not done:
                self._on_stall(started)
                if fresh and not self._tentative:
                    self._hold_in_spool(records)
                self._drain_queue_to_spool(keep_in_flight=True)
                continue
            exc = future.exception()
            if exc is not None:
                per_event = self._per_event(exc, members)
                if per_event is exc:
                    raise exc
                raise per_event from exc
            with self._cv:
                self._records_sent += len(out)
            return

    def _stall_due_locked(self, now: float, started: float) -> bool:
        """A stalled export and a queued batch due: it goes to the spool now."""
        if self._spool is None or self._closing or not self._queue or now - started < self._stall_s:
            return False
        return len(self._queue) >= self._batch_size or now >= self._oldest_at + self._interval

    def _export_wait_locked(self, now: float, started: float, aborted: bool) -> float:
        """How long the worker may sleep while an export is in flight (wakes: done, emits, this)."""
        wake = now + OVERFLOW_POLL_S
        if self._closing and not aborted:
            wake = min(wake, self._abort_at)
        elif self._spool is not None and self._queue and not self._closing:
            wake = min(wake, max(started + self._stall_s, self._oldest_at + self._interval))
        return max(wake - now, 0.001)

    def _on_stall(self, started: float) -> None:
        """The exporter is waiting on its transport: report unhealthy, so fresh records spool."""
        with self._cv:
            if self._healthy:
                log.warning("steplens export waiting for %.1f s; spooling newer events meanwhile",
                            time.monotonic() - started)
            self._healthy = False
            self._cv.notify_all()

    def _hold_in_spool(self, records: Sequence[OutRecord]) -> None:
        """Write the stalled fresh export's events to the (empty) spool before anything newer.

        Newer events are about to be drained to the spool behind them; if the export then fails,
        its events are already ahead of them, in emission order (appending them after the export
        failed put them behind: a rank's first steps arrived after its later ones). If it succeeds,
        _export_fresh takes them off the spool's head again. They count as pending in the spool,
        not in flight, meanwhile.
        """
        assert self._spool is not None  # drains happen only with a spool
        if not self._spool.empty:  # cannot happen (fresh exports run with an empty spool): keep the old order
            return
        stored = self._spool.append(records)
        with self._cv:
            self._tentative = stored
            self._in_flight -= stored
            self._sync_spool_locked()

    def _release_held(self, delivered: int) -> None:
        """The first `delivered` held events went out: take them off the spool's head."""
        assert self._spool is not None
        if delivered:
            self._spool.peek(delivered)
            self._spool.consume(delivered)
        with self._cv:
            self._sync_spool_locked()

    def _sync_spool_locked(self) -> None:
        """The spool's counts as the stats report them, after any change to the spool."""
        assert self._spool is not None
        self._spool_pending = self._spool.pending
        self._spool_bytes = self._spool.bytes

    @staticmethod
    def _failed_of(exc: BaseException, batch: list[OutRecord]) -> list[OutRecord]:
        """The records of `batch` an export failure names as not delivered (all, if it names none)."""
        return list(exc.failed) if isinstance(exc, ExportError) and exc.failed is not None else batch

    @staticmethod
    def _delivered_prefix(batch: list[OutRecord], failed: list[OutRecord]) -> int:
        """How many leading records of `batch` were delivered, when exactly those were (else 0)."""
        delivered = len(batch) - len(failed)
        return delivered if failed == batch[delivered:] else 0

    def _overflowing_locked(self) -> bool:
        return self._spool is not None and len(self._queue) >= self._high_water and not self._closing

    def _wake_worker(self, _future: object = None) -> None:
        with self._cv:
            self._cv.notify_all()

    def _export_fresh(self, batch: list[OutRecord]) -> None:
        """Export a batch from the queue; with packing on, its events in the order of their packed records.

        Each (topic, key) keeps its order, so nothing changes on the wire, but an export whose
        later records fail then fails a suffix of the batch: the spool, which can only skip a
        delivered prefix, takes the delivered events off its head instead of sending them again
        (held in emission order, rank 0's delivered steps sat between rank 1's failed ones).
        """
        out, members = self._packed(batch)
        if members:
            batch = [e for r in out for e in members[id(r)]]
        self._tentative = 0
        try:
            self._export(batch, fresh=True, packed=(out, members))
        except Exception as exc:  # any exporter failure is an outage
            failed = self._failed_of(exc, batch)
            held, self._tentative = self._tentative, 0
            if held:
                self._fail_held(exc, batch, failed, held)
                return
            self._on_failure(exc, delivered=len(batch) - len(failed))
            if self._spool is not None:
                self._to_spool(failed)
            else:
                with self._cv:
                    self._dropped[EXPORT_FAILED] += len(failed)
                    self._in_flight = 0
            return
        held, self._tentative = self._tentative, 0
        if held:
            self._release_held(held)
        with self._cv:
            self._exported += len(batch)
            self._in_flight = 0
            self._on_success_locked()

    def _fail_held(self, exc: BaseException, batch: list[OutRecord], failed: list[OutRecord], held: int) -> None:
        """A fresh export failed after its first `held` events were put at the spool's head.

        A delivered prefix is taken off again; delivered events elsewhere stay (sent again: at-least-once,
        only after an abort or a non-retriable error). Failed events the spool could not hold are appended.
        """
        prefix = self._delivered_prefix(batch, failed)
        failed_set = set(failed)
        rest = [r for r in batch[held:] if r in failed_set]  # failed, not in the spool yet
        self._release_held(min(prefix, held))
        # exported now: the delivered prefix, or else the delivered events the spool does not hold
        self._on_failure(exc, delivered=prefix or (len(batch) - held - len(rest)))
        with self._cv:
            self._spooled += held - min(prefix, held)
        if rest:
            self._to_spool(rest)
        else:
            with self._cv:
                self._in_flight = 0
                self._cv.notify_all()

    def _to_spool(self, batch: Sequence[OutRecord], in_flight_after: int = 0) -> None:
        """Append in order; what does not fit under max_spool_bytes is dropped as spool_full."""
        assert self._spool is not None
        before = self._spool.bytes
        stored = self._spool.append(batch) if batch else 0
        with self._cv:
            self._spooled += stored
            lost = len(batch) - stored
            if lost:
                # append() stores a prefix that fits; storing nothing although the first record
                # would have fitted means the disk write itself failed.
                first = len(batch[0].value) + len(batch[0].topic) + 64
                write_failed = stored == 0 and before + first <= self._spool.max_bytes
                self._dropped[EXPORT_FAILED if write_failed else SPOOL_FULL] += lost
            self._in_flight = in_flight_after
            self._sync_spool_locked()
            self._cv.notify_all()

    def _drain_queue_to_spool(self, keep_in_flight: bool = False) -> None:
        """Keep the queue short while the exporter is slow: newer records queue up behind the spool.

        `keep_in_flight`: an export is under way; its records stay counted as in flight.
        """
        with self._cv:
            rest = list(self._queue)
            self._queue.clear()
            token = self._take_locked(len(rest))
            in_flight = self._in_flight if keep_in_flight else 0
            self._in_flight = in_flight + len(rest)
        if rest:
            self._to_spool(rest, in_flight_after=in_flight)
        else:
            with self._cv:
                self._in_flight = in_flight
        self._settle(token)

    def _replay(self) -> None:
        """Send the spool oldest first until it is empty or the exporter fails again."""
        try:
            self._replay_spool()
        except OSError as exc:  # the spool's disk went bad: back off and try again later
            log.warning("steplens spool unreadable", exc_info=True)
            self._on_failure(exc, delivered=0)

    def _replay_spool(self) -> None:
        assert self._spool is not None
        while True:
            self._drain_queue_to_spool()
            with self._cv:
                if self._closing:
                    return
            if self._spool.empty:
                break
            records = self._spool.peek(self._batch_size)
            if not records:  # only unreadable bytes were left
                self._spool.consume(0)
                with self._cv:
                    self._sync_spool_locked()
                if self._spool.empty:
                    break
                continue
            try:
                self._export(records)
            except Exception as exc:
                # The spool can only skip a delivered prefix; anything else is resent (at-least-once).
                delivered = self._delivered_prefix(records, self._failed_of(exc, records))
                if delivered:
                    self._spool.consume(delivered)
                    self._count_replayed(delivered)
                self._on_failure(exc, delivered=0)
                return
            self._spool.consume(len(records))
            self._count_replayed(len(records))
        with self._cv:
            self._sync_spool_locked()
            self._on_success_locked()
            self._cv.notify_all()

    def _count_replayed(self, n: int) -> None:
        assert self._spool is not None
        with self._cv:
            self._exported += n
            self._replayed += n
            self._sync_spool_locked()
            self._cv.notify_all()

    def _on_failure(self, exc: BaseException, delivered: int) -> None:
        with self._cv:
            self._exported += delivered
            self._failures += 1
            if self._healthy:
                log.warning("steplens export failed (%s); %s and retrying", exc,
                            "spooling" if self._spool is not None else "dropping")
            self._healthy = False
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self._backoff_max)
            self._cv.notify_all()

    def _on_success_locked(self) -> None:
        if not self._healthy:
            log.info("steplens export recovered")
        self._healthy = True
        self._backoff = self._backoff_min
        self._retry_at = 0.0

    def _finish(self) -> None:
        """Closing: export what is left if the exporter works, else keep it in the spool."""
        with self._cv:
            rest = list(self._queue)
            self._queue.clear()
            token = self._take_locked(len(rest))
            self._in_flight = len(rest)
            spooling = self._spooling_locked()
            healthy = self._healthy
        if not spooling and healthy:
            while rest:
                chunk = rest[: self._batch_size]
                try:
                    self._export(chunk)  # on the export thread: a stalled one is aborted at _abort_at
                except Exception as exc:
                    failed = self._failed_of(exc, chunk)
                    self._on_failure(exc, delivered=len(chunk) - len(failed))
                    rest = failed + rest[len(chunk):]
                    break
                rest = rest[len(chunk):]
                with self._cv:
                    self._exported += len(chunk)
                    self._in_flight = len(rest)
        if not rest:
            with self._cv:
                self._in_flight = 0
        elif self._spool is not None:
            self._to_spool(rest)
        else:
            with self._cv:
                self._dropped[CLOSED] += len(rest)
                self._in_flight = 0
        self._settle(token)


class _ExportThread:
    """One daemon thread calling `exporter.export`: a hung export never holds up interpreter exit."""

    def __init__(self, exporter: Exporter, name: str) -> None:
        self._exporter = exporter
        self._jobs: deque[tuple[Sequence[OutRecord], Future[None]] | None] = deque()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, records: Sequence[OutRecord]) -> Future[None]:
        future: Future[None] = Future()
        with self._cv:
            self._jobs.append((records, future))
            self._cv.notify()
        return future

    def shutdown(self) -> None:
        with self._cv:
            self._jobs.append(None)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._jobs))
                job = self._jobs.popleft()
            if job is None:
                return
            records, future = job
            try:
                self._exporter.export(records)
            except BaseException as exc:  # handed to the emitter's worker, which counts it
                future.set_exception(exc)
            else:
                future.set_result(None)


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
            em._queue = deque()

    os.register_at_fork(after_in_child=reinit)


__all__ = [
    "CLOSED", "ENCODE_ERROR", "EXPORT_FAILED", "FORKED", "INTERNAL_ERROR", "QUEUE_FULL", "SPOOL_FULL",
    "TOO_LARGE", "UNROUTABLE", "BackgroundEmitter", "EmitterStats", "route",
]
