"""The emitter's delivery state machine: bounded queue, counted drops, batching, backoff and spool decisions.

Why apart: every decision the emitter takes (is a batch due, may the exporter be tried again, do
fresh records go to the spool, is an export stalled, when does the worker look again, what an
export failure leaves to resend) is here as plain data, with no threads, no clock and no I/O, so
it can be tested without Kafka, a disk or a sleep (tests/producers/test_delivery.py). The thread
shell (producers/emitter.py's `BackgroundEmitter`) holds one lock around every call, passes the
time in, and does what comes back: export a batch, write or replay the spool, finish.

Counts are in events (one emit = one event), packed or not; see `EmitterStats`.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from infra.backoff import Backoff
from producers.exporter import ExportError, OutRecord

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

# While an export is in flight the worker sleeps until it ends or the queue reaches its high-water mark
# (both wake it); this bound is only a safety net. Polling instead (every 50 ms) cost a rank's helper
# threads ~10 us per step once exports wait for a relay's durable ack (~0.2 s each).
OVERFLOW_POLL_S = 1.0
# An export still waiting after this long is stalled (a broker away, the exporter retrying in place):
# newer records then go to the spool as each batch comes due, where they survive the process, instead
# of waiting in memory for the queue's high-water mark.
DEFAULT_STALL_S = 2.0

Action = Literal["finish", "spool", "replay", "export"]


class Decision(NamedTuple):
    """The worker's next action, or None and when to look again (monotonic seconds)."""

    action: Action | None
    wake_at: float


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


@dataclass(frozen=True, slots=True)
class HeldFailure:
    """What a failed fresh export leaves, once its first `held` events were put at the spool's head.

    release: leading held events to take off the spool again (delivered); delivered: events to count
    as exported; spooled: held events that stay in the spool (counted as spooled now); rest: failed
    events after the held ones, still to be appended to the spool.
    """

    release: int
    delivered: int
    spooled: int
    rest: list[OutRecord]


def failed_of(exc: BaseException, batch: list[OutRecord]) -> list[OutRecord]:
    """The records of `batch` an export failure names as not delivered (all, if it names none)."""
    return list(exc.failed) if isinstance(exc, ExportError) and exc.failed is not None else batch


def delivered_prefix(batch: list[OutRecord], failed: list[OutRecord]) -> int:
    """How many leading records of `batch` were delivered, when exactly those were (else 0)."""
    delivered = len(batch) - len(failed)
    return delivered if failed == batch[delivered:] else 0


def per_event(exc: BaseException, members: dict[int, tuple[OutRecord, ...]]) -> BaseException:
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


def held_failure(batch: list[OutRecord], failed: list[OutRecord], held: int) -> HeldFailure:
    """A fresh export failed after its first `held` events were put at the spool's head.

    A delivered prefix is taken off again; delivered events elsewhere stay (sent again: at-least-once,
    only after an abort or a non-retriable error). Failed events the spool does not hold yet are the rest.
    """
    prefix = delivered_prefix(batch, failed)
    failed_set = set(failed)
    rest = [r for r in batch[held:] if r in failed_set]  # failed, not in the spool yet
    release = min(prefix, held)
    # exported now: the delivered prefix, or else the delivered events the spool does not hold
    return HeldFailure(release=release, delivered=prefix or (len(batch) - held - len(rest)),
                       spooled=held - release, rest=rest)


def spool_loss_reason(batch: Sequence[OutRecord], stored: int, bytes_before: int, max_bytes: int) -> str:
    """Why the records of `batch` after the first `stored` were not spooled.

    The spool stores a prefix that fits; storing nothing although the first record would have
    fitted means the disk write itself failed.
    """
    first = len(batch[0].value) + len(batch[0].topic) + 64
    return EXPORT_FAILED if stored == 0 and bytes_before + first <= max_bytes else SPOOL_FULL


class Delivery:
    """The emitter's state and every decision on it; the caller holds its lock around each call.

    Settling (`settled`): queued records are numbered in queue order; `popped` records have left
    the queue, and `outstanding` holds the first number of each popped run not yet exported,
    spooled or dropped (an export in flight, a drain to the spool).
    """

    def __init__(
        self,
        *,
        max_queue: int,
        batch_size: int,
        flush_interval_s: float,
        retry_backoff_s: float,
        retry_backoff_max_s: float,
        stall_s: float = DEFAULT_STALL_S,
        has_spool: bool = False,
        spool_pending: int = 0,
        spool_bytes: int = 0,
    ) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ValueError("max_queue and batch_size must be >= 1")
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.interval = flush_interval_s
        self.stall_s = stall_s
        self.has_spool = has_spool
        self.high_water = max(1, min(max_queue, max(batch_size, max_queue // 2)))

        self.queue: deque[OutRecord] = deque()
        self.emitted = 0
        self.exported = 0
        self.spooled = 0
        self.replayed = 0
        self.failures = 0
        self.records_sent = 0
        self.in_flight = 0
        self.dropped: Counter[str] = Counter()
        self.spool_pending = spool_pending
        self.spool_bytes = spool_bytes
        self.healthy = True
        self.backoff = Backoff(backoff=(retry_backoff_s, retry_backoff_max_s))
        self.retry_at = 0.0
        self.flush_requests = 0
        self.oldest_at = 0.0  # when the oldest queued record arrived
        self.enqueued = 0
        self.popped = 0
        self.outstanding: list[int] = []
        self.closing = False
        self.abort_at = float("inf")  # closing: when a stalled export is aborted (Abortable exporters)
        self.worker_done = False

    # --- accepting records ---------------------------------------------------------------------
    def enqueue(self, rec: OutRecord, now: float) -> bool:
        """Queue one record; False (counted as closed or queue_full) when it cannot be."""
        self.emitted += 1
        if self.closing:
            self.dropped[CLOSED] += 1
            return False
        if len(self.queue) >= self.max_queue:
            self.dropped[QUEUE_FULL] += 1
            return False
        if not self.queue:
            self.oldest_at = now  # a record waits at most flush_interval_s
        self.queue.append(rec)
        self.enqueued += 1
        return True

    def wakes_worker(self) -> bool:
        """After one accepted emit: the worker needs waking (first record, a full batch, the high-water mark)."""
        n = len(self.queue)
        return n == 1 or n == self.batch_size or n == self.high_water

    def enqueue_all(self, recs: Sequence[OutRecord], now: float, *, send_now: bool) -> int:
        """Queue several records (each counted); `send_now`: the queue is due at once. How many were accepted."""
        accepted = 0
        for rec in recs:
            accepted += self.enqueue(rec, now)
        if accepted and send_now:
            self.oldest_at = float("-inf")
        return accepted

    def accept_prefix(self, records: Sequence[OutRecord], now: float, *, send_now: bool) -> tuple[int, int, bool]:
        """Queue the longest prefix of `records` that fits (refused ones are not drops: the sender keeps them).

        Returns how many, the queue number just past them (for `settled`), and whether to wake the worker.
        """
        if self.closing:
            return 0, self.enqueued, False
        n = max(min(len(records), self.max_queue - len(self.queue)), 0)
        if n == 0:
            return 0, self.enqueued, False
        if not self.queue:
            self.oldest_at = now
        self.queue.extend(records[:n])
        self.enqueued += n
        self.emitted += n
        if send_now:
            self.oldest_at = float("-inf")
        return n, self.enqueued, send_now or len(self.queue) == n or len(self.queue) >= self.batch_size

    def refuse(self, reason: str) -> None:
        """One emit refused before reaching the queue: counted as emitted and dropped."""
        self.emitted += 1
        self.dropped[reason] += 1

    # --- settling ------------------------------------------------------------------------------
    def settled(self) -> int:
        """Every record numbered below this is exported, spooled or dropped."""
        return min(self.outstanding) if self.outstanding else self.popped

    def take(self, n: int) -> int:
        """`n` records leave the queue, not settled yet: the token `settle` takes once they are."""
        start = self.popped
        self.popped += n
        self.outstanding.append(start)
        return start

    def settle(self, token: int) -> None:
        self.outstanding.remove(token)

    # --- reading -------------------------------------------------------------------------------
    def stats(self) -> EmitterStats:
        return EmitterStats(
            emitted=self.emitted,
            exported=self.exported,
            dropped=dict(self.dropped),
            spooled=self.spooled,
            replayed=self.replayed,
            queued=len(self.queue),
            in_flight=self.in_flight,
            spool_pending=self.spool_pending,
            spool_bytes=self.spool_bytes,
            export_failures=self.failures,
            healthy=self.healthy,
            records_sent=self.records_sent,
        )

    def pending(self) -> int:
        return len(self.queue) + self.in_flight + self.spool_pending

    # --- the worker's decisions ----------------------------------------------------------------
    def spooling(self) -> bool:
        """Fresh records go to the spool while the exporter is down or older records wait there."""
        return self.has_spool and (not self.healthy or self.spool_pending > 0)

    def decide(self, now: float) -> Decision:
        """The worker's next action ("finish", "spool", "replay", "export") or None and when to look again."""
        if self.closing:
            return Decision("finish", now)
        urgent = self.flush_requests > 0
        next_batch_at = self.oldest_at + self.interval
        due = len(self.queue) >= self.batch_size or (bool(self.queue) and (now >= next_batch_at or urgent))
        can_export = now >= self.retry_at
        never = now + 3600.0
        if self.spooling():
            if due:
                return Decision("spool", now)
            if self.spool_pending > 0 and can_export:
                return Decision("replay", now)
            wake = min(next_batch_at if self.queue else never, self.retry_at if self.spool_pending else never)
            return Decision(None, wake)
        if due and can_export:
            return Decision("export", now)
        if not can_export:
            return Decision(None, self.retry_at)  # keep buffering in the queue until the retry is due
        return Decision(None, next_batch_at if self.queue else never)

    def pop_batch(self, now: float) -> tuple[list[OutRecord], int]:
        """The next batch leaves the queue (in flight) and its settle token; the next one waits from `now`."""
        batch = [self.queue.popleft() for _ in range(min(self.batch_size, len(self.queue)))]
        token = self.take(len(batch))
        self.in_flight = len(batch)
        self.oldest_at = now
        return batch, token

    def drain_queue(self, *, keep_in_flight: bool) -> tuple[list[OutRecord], int, int]:
        """Everything queued leaves the queue (in flight): the records, their settle token, and the
        in-flight count to return to once they are handled (`keep_in_flight`: an export is under way)."""
        rest = list(self.queue)
        self.queue.clear()
        token = self.take(len(rest))
        in_flight = self.in_flight if keep_in_flight else 0
        self.in_flight = in_flight + len(rest)
        return rest, token, in_flight

    def replay_due(self, now: float) -> bool:
        return self.spool_pending > 0 and now >= self.retry_at

    # --- while an export is in flight ----------------------------------------------------------
    def abort_due(self, now: float, aborted: bool) -> bool:
        """Closing, and the time to abort a stalled export (so its records can be spooled) has come."""
        return self.closing and not aborted and now >= self.abort_at

    def overflowing(self) -> bool:
        """The queue reached its high-water mark: move it to the spool rather than drop it as queue_full."""
        return self.has_spool and len(self.queue) >= self.high_water and not self.closing

    def stall_due(self, now: float, started: float) -> bool:
        """A stalled export and a queued batch due: it goes to the spool now."""
        if not self.has_spool or self.closing or not self.queue or now - started < self.stall_s:
            return False
        return len(self.queue) >= self.batch_size or now >= self.oldest_at + self.interval

    def export_wait(self, now: float, started: float, aborted: bool) -> float:
        """How long the worker may sleep while an export is in flight (wakes: done, emits, this)."""
        wake = now + OVERFLOW_POLL_S
        if self.closing and not aborted:
            wake = min(wake, self.abort_at)
        elif self.has_spool and self.queue and not self.closing:
            wake = min(wake, max(started + self.stall_s, self.oldest_at + self.interval))
        return max(wake - now, 0.001)

    # --- outcomes ------------------------------------------------------------------------------
    def on_failure(self, delivered: int, now: float) -> bool:
        """An export failed (`delivered` of its events got through): back off. True if it was healthy."""
        was_healthy = self.healthy
        self.exported += delivered
        self.failures += 1
        self.healthy = False
        self.retry_at = now + self.backoff.next_delay()
        return was_healthy

    def on_stall(self) -> bool:
        """The exporter waits on its transport: unhealthy, so fresh records spool. True if it was healthy."""
        was_healthy = self.healthy
        self.healthy = False
        return was_healthy

    def on_success(self) -> bool:
        """The exporter works: the backoff starts over. True if it had been unhealthy (recovered)."""
        recovered = not self.healthy
        self.healthy = True
        self.backoff.reset()
        self.retry_at = 0.0
        return recovered

    def exported_events(self, n: int, *, in_flight_after: int) -> None:
        self.exported += n
        self.in_flight = in_flight_after

    def replayed_events(self, n: int) -> None:
        self.exported += n
        self.replayed += n

    def drop_in_flight(self, reason: str, n: int) -> None:
        """The `n` in-flight records are lost for `reason`; nothing is in flight any more."""
        self.dropped[reason] += n
        self.in_flight = 0

    def spool_appended(self, batch: Sequence[OutRecord], stored: int, bytes_before: int, max_bytes: int,
                       in_flight_after: int) -> None:
        """The spool took the first `stored` of `batch`; the rest is dropped with its reason."""
        self.spooled += stored
        lost = len(batch) - stored
        if lost:
            self.dropped[spool_loss_reason(batch, stored, bytes_before, max_bytes)] += lost
        self.in_flight = in_flight_after

    def hold(self, stored: int) -> None:
        """`stored` events of the export in flight went to the spool's head: pending there, not in flight."""
        self.in_flight -= stored

    def sync_spool(self, pending: int, nbytes: int) -> None:
        """The spool's counts as the stats report them, after any change to the spool."""
        self.spool_pending = pending
        self.spool_bytes = nbytes

    # --- lifecycle -----------------------------------------------------------------------------
    def request_flush(self) -> None:
        """Someone flushes: partial batches are due, and a failed exporter is retried right away."""
        self.flush_requests += 1
        self.retry_at = 0.0

    def end_flush(self) -> None:
        self.flush_requests = max(self.flush_requests - 1, 0)

    def begin_close(self, abort_at: float) -> None:
        self.closing = True
        self.abort_at = abort_at

    def crash(self) -> None:
        """The worker died: what is queued is dropped as internal_error and everything counts as settled."""
        self.closing = True
        self.dropped[INTERNAL_ERROR] += len(self.queue)
        self.queue.clear()
        self.popped, self.outstanding = self.enqueued, []

    def worker_stopped(self) -> None:
        self.worker_done = True
        self.in_flight = 0

    def reset_after_fork(self) -> None:
        """A forked child never sends the parent's queued records."""
        self.queue = deque()


__all__ = [
    "CLOSED", "DEFAULT_STALL_S", "ENCODE_ERROR", "EXPORT_FAILED", "FORKED", "INTERNAL_ERROR", "OVERFLOW_POLL_S",
    "QUEUE_FULL", "SPOOL_FULL", "TOO_LARGE", "UNROUTABLE", "Action", "Decision", "Delivery", "EmitterStats",
    "HeldFailure", "delivered_prefix", "failed_of", "held_failure", "per_event", "spool_loss_reason",
]
