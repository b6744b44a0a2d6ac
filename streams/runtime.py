"""One consumer runtime for the per-event stages: poll → process → sink → commit.

Every event of the fleet passes the detect worker's decode stage and the land worker, so both
read with a plain kafka-python consumer thread (Faust/aiokafka cost ~100 µs per message) and
both need the same delivery discipline. It lives here, once; a stage supplies its clients and
`handle` (process the batch and put the results on their sink), and the runtime owns the rest:

- **batching**: each non-empty poll is a batch (`Batching.accumulate` False: decode, whose
  latency is detection's), with the polls that bring more within `gather_s` of its first
  records joining it (one poll holds what one broker's fetch returned: on three brokers a
  step's records came in polls a third the size, and a batch's decode has a fixed cost); or
  polls add up to `max_records` or `within_s` after the first record (True: land, where a
  batch is one insert per table);
- **commit order**: the batch's offsets (the consumed positions: exactly its ends) are
  committed only after `handle` returned True, i.e. its outputs are on the broker or in
  ClickHouse; False (the stage stops before its sink confirmed) commits nothing, and the next
  owner re-reads the batch;
- **outages**: polls are retried through a broker outage (`poll_through_outage`); a commit is
  either retried through it (`Commits.through_outage`: land, whose batch is landed already) or
  given up after `Commits.timeout_ms` and re-read (decode, whose replayed chunks the engine
  absorbs);
- **rebalances**: `heal` after every poll (a member left out of its group rejoins), and a
  commit refused by a rebalance leaves the batch to its new owner (`after_failed_commit`);
  a batch in hand when a rebalance starts is held until the new assignment is known
  (`MovedPartitions`, the stage's subscription listener), then loses the records of the
  partitions that moved to another member: their next owner reads them from the committed
  offsets, so handling them here too would put the same input on the sink twice (the restart
  test saw it after partitions were added: 8 step reports decoded twice). A partition the member
  keeps keeps its position in kafka-python, so its records stay in the batch and are handled;
  partitions lost (the member was dropped from the group) leave the batch at once;
- **failure**: anything escaping a batch ends the thread with `failed` set and nothing
  committed; the worker's watchdog exits the process and its restart re-reads.

Faust stays for what it serves: the per-job detect agent, the parse agent, worker lifecycle.
The detect state store's reads are no loop of this kind: it restores by reading a compacted
topic to its end by assignment (no group, nothing committed); `read_to_end` is that read
(`streams/detect/state/store.py` uses it).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from infra.backoff import OUTAGE_BACKOFF_S, Backoff
from infra.consumer_group import REBALANCE_ERRORS, after_failed_commit, heal
from infra.delivery import poll_through_outage, retry_through_outage
from streams.gc_tuning import tune_gc

log = logging.getLogger(__name__)

# after an empty poll: a poll returns as soon as records arrive, so a long idle timeout delays nothing and
# keeps an idle worker idle (5 empty polls a second cost the decode thread ~0.3 % of a core)
IDLE_POLL_MS = 1000
HELD_POLL_MS = 100  # while a rebalance holds the batch in hand
# no poll waits longer than this: a stop is seen within it (kafka-python's poll cannot be woken). A landing batch
# waits up to `sink_batch_seconds` (5 s) for records, and one poll that long made every SIGTERM of land take ~4 s
MAX_POLL_MS = IDLE_POLL_MS
# every worker's graceful stop is cut short after this (exit 0: what was not committed is read again): Faust's
# shutdown waiting on a dead broker (streams/__main__.py), a landing batch still inserting (streams/land/worker.py)
STOP_GRACE_S = 15.0


class Record(Protocol):
    """What the runtime and its stages read of a kafka-python ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class Consumer(Protocol):
    def poll(self, timeout_ms: int = ..., max_records: int | None = ...) -> dict[Any, list[Any]]: ...

    def commit(self, offsets: Any = ..., timeout_ms: int | None = ...) -> None: ...

    def close(self) -> None: ...


class PositionedConsumer(Protocol):
    """What `read_to_end` uses of a kafka-python consumer with assigned partitions."""

    def poll(self, timeout_ms: int = ..., max_records: int | None = ...) -> dict[Any, list[Any]]: ...

    def position(self, partition: TopicPartition) -> int: ...


def partitions_once_there(consumer: Any, topics: Sequence[str], stopping: threading.Event,
                          what: str) -> list[TopicPartition] | None:
    """Every partition of `topics`, waiting (with backoff, through a broker outage) until each exists; None:
    `stopping` was set first. For the loops that read whole topics by assignment (the alert bridge, the
    mitigation worker), which may start before the workers that create the topics."""
    backoff = Backoff(stopping.wait)
    while True:
        found = {t: retry_through_outage(lambda t=t: consumer.partitions_for_topic(t),  # type: ignore[misc]
                                         stopping.wait, f"{what} metadata") for t in topics}
        if all(found.values()):
            return [TopicPartition(t, p) for t in topics for p in sorted(found[t] or ())]
        if stopping.is_set():
            return None
        log.info("%s: waiting for topics %s to exist", what, [t for t in topics if not found[t]])
        if backoff.pause():
            return None


# read_to_end: a read that gets nothing this long means the broker is away (the caller's retry decides what then)
READ_STALL_S = 60.0


def read_to_end(consumer: PositionedConsumer, parts: Sequence[TopicPartition], end: Mapping[TopicPartition, int],
                stall_s: float = READ_STALL_S, *, poll_ms: int = IDLE_POLL_MS,
                clock: Callable[[], float] = time.monotonic) -> Iterator[Any]:
    """The records of `parts` (assigned and positioned by the caller) until each partition's
    position reaches its offset in `end`; raises KafkaTimeoutError when no poll returned a record
    for `stall_s`.

    A read by assignment, for restoring state from a compacted topic (no group, nothing
    committed): unlike a `ConsumerLoop` it ends, at the ends the caller took before it began
    (records written meanwhile are not waited for), and it does not wait through an outage
    forever: the caller decides whether to try again.
    """
    last = clock()
    while any(consumer.position(tp) < end[tp] for tp in parts):
        polled = consumer.poll(timeout_ms=poll_ms)
        if polled:
            last = clock()
        elif clock() - last > stall_s:
            raise KafkaTimeoutError(f"reading {parts[0].topic} made no progress for {stall_s:.0f} s")
        for records in polled.values():
            yield from records


@dataclass(frozen=True, slots=True)
class Batching:
    """How polls make a batch (see the module docstring)."""

    max_records: int
    within_s: float
    accumulate: bool
    idle_poll_ms: int = IDLE_POLL_MS
    # accumulate False: polls returning records within this long of the batch's first join it (until an
    # empty poll or max_records); 0: each poll is its own batch
    gather_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Commits:
    """How a handled batch's offsets are committed (see the module docstring)."""

    through_outage: bool  # retry a broker outage with backoff (True) or give the batch up to be re-read
    timeout_ms: int  # one attempt's bound
    backoff_s: tuple[float, float] = OUTAGE_BACKOFF_S


@dataclass(slots=True)
class Batch:
    """The records of one batch in the order they were polled, and per partition."""

    records: list[Any] = field(default_factory=list)
    polled: dict[Any, list[Any]] = field(default_factory=dict)
    first_at: float = 0.0

    def add(self, polled: dict[Any, list[Any]], now: float) -> None:
        if not self.records:
            self.first_at = now
        for tp, records in polled.items():
            self.records.extend(records)
            self.polled.setdefault(tp, []).extend(records)

    def __len__(self) -> int:
        return len(self.records)

    def drop(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Remove the records of `partitions` ((topic, partition) pairs); how many were removed."""
        gone = set(partitions)
        if not gone:
            return 0
        kept = {tp: records for tp, records in self.polled.items() if (tp.topic, tp.partition) not in gone}
        if len(kept) == len(self.polled):
            return 0
        before = len(self.records)
        self.polled = kept
        self.records = [r for r in self.records if (r.topic, r.partition) not in gone]
        return before - len(self.records)


class MovedPartitions(ConsumerRebalanceListener):  # type: ignore[misc]
    """A loop's subscription listener: the batch in hand keeps only the partitions the member still owns.

    kafka-python calls it inside `poll()` (on its IO thread, while the loop's thread waits in
    that poll), so the batch is between two polls, never being handled. With the eager protocol
    every partition is revoked before the join and the new assignment comes after it, and a
    partition in both keeps its position (kafka-python 3.0 preserves its state): only the
    difference moved. Between the two the loop holds its batch (`ConsumerLoop.held`).
    """

    def __init__(self, loop: ConsumerLoop) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.loop.revoking = {(tp.topic, tp.partition) for tp in revoked}

    def on_partitions_assigned(self, assigned: Any) -> None:
        kept = {(tp.topic, tp.partition) for tp in assigned}
        moved = (self.loop.revoking or set()) - kept
        self.loop.revoking = None
        self.loop.forget(moved)

    def on_partitions_lost(self, lost: Any) -> None:
        self.loop.revoking = None
        self.loop.forget({(tp.topic, tp.partition) for tp in lost})


class ConsumerLoop(threading.Thread):
    """The runtime's thread; a stage subclasses it and supplies `open_consumer` and `handle`."""

    def __init__(self, name: str, batching: Batching, commits: Commits, *, gc_threshold: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name=f"steplens-{name}", daemon=True)
        self.stage, self.batching, self.commits = name, batching, commits
        self.gc_threshold, self._clock = gc_threshold, clock
        self.stopping = threading.Event()
        self.failed: BaseException | None = None
        self.batches = 0  # batches handled (their outputs on the sink)
        self.commit_failures = 0  # commits refused (a rebalance, or given up): those batches are re-read
        self.commit_retries = 0  # commit attempts that met a broker outage and were retried
        self.moved_records = 0  # records dropped from a batch in hand because a rebalance moved their partitions
        self.revocations = MovedPartitions(self)  # the stage subscribes with it
        self.revoking: set[tuple[str, int]] | None = None  # revoked, the new assignment not known yet
        self._batch = Batch()  # an attribute: the subscription listener drops moved partitions' records from it

    # -- what a stage supplies -------------------------------------------------------------------------------

    def open_consumer(self) -> Consumer:
        """The stage's group consumer (and whatever clients its sink needs), subscribed or about to be."""
        raise NotImplementedError

    def ready(self, consumer: Consumer) -> bool:
        """Called once before the first poll; False: stopping before the stage could start."""
        return True

    def handle(self, consumer: Consumer, batch: Batch) -> bool:
        """Process `batch` and put its outputs on their sink; True once the sink has them all (the
        offsets may be committed), False when stopping first (nothing is committed)."""
        raise NotImplementedError

    def on_polled(self, consumer: Consumer, polled: dict[Any, list[Any]], first: bool) -> None:
        """After a non-empty poll; `first`: it began a batch (metrics)."""

    def while_held(self, consumer: Consumer) -> None:
        """After each poll while a rebalance holds the batch (the stage's input is stalled meanwhile)."""

    def after_batch(self, committed: bool) -> None:
        """After a handled batch's commit, done or refused (metrics)."""

    def on_commit_retry(self, exc: KafkaError) -> None:
        """A commit met a broker outage and will be retried (metrics)."""

    def close_clients(self, consumer: Consumer | None) -> None:
        """Close what `open_consumer` opened; runs on this thread as it ends, whatever happened."""
        if consumer is not None:
            consumer.close()

    # -- the runtime -----------------------------------------------------------------------------------------

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Drop the batch in hand's records of `partitions` (a rebalance moved them; see `MovedPartitions`)."""
        dropped = self._batch.drop(partitions)
        if dropped:
            self.moved_records += dropped
            log.info("%s: a rebalance moved partitions of the batch in hand: %d records left to their next owner",
                     self.stage, dropped)

    @property
    def held(self) -> bool:
        """A rebalance revoked the partitions and has not assigned the new ones yet: the batch waits."""
        return self.revoking is not None

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        tune_gc(self.gc_threshold)
        consumer: Consumer | None = None
        try:
            consumer = self.open_consumer()
            if self.ready(consumer):
                self._loop(consumer)
        except BaseException as exc:  # the worker's watchdog sees it and exits the process
            self.failed = exc
            log.exception("%s loop failed", self.stage)
        finally:
            try:
                self.close_clients(consumer)
            except Exception as exc:  # closing is best effort: nothing is committed here
                log.warning("closing the %s clients failed: %r", self.stage, exc)

    def _poll_timeout_ms(self, batch: Batch, last_empty: bool) -> int:
        return min(self._wait_ms(batch, last_empty), MAX_POLL_MS)

    def _wait_ms(self, batch: Batch, last_empty: bool) -> int:
        within_ms = int(self.batching.within_s * 1000)
        if self.held:  # the rebalance's join runs in these polls: no spinning on zero timeouts meanwhile
            return max(within_ms, HELD_POLL_MS)
        if not self.batching.accumulate:
            if batch and self.batching.gather_s > 0:  # gathering: wait only for what is left of the window
                return int(max(0.0, self.batching.gather_s - (self._clock() - batch.first_at)) * 1000)
            return max(within_ms, self.batching.idle_poll_ms) if last_empty else within_ms
        if not batch:
            return within_ms
        return int(max(0.0, self.batching.within_s - (self._clock() - batch.first_at)) * 1000)

    def _due(self, batch: Batch, last_empty: bool) -> bool:
        if not batch or self.held:
            return False
        if not self.batching.accumulate:
            b = self.batching
            return (b.gather_s <= 0 or last_empty or len(batch) >= b.max_records
                    or self._clock() - batch.first_at >= b.gather_s)
        return len(batch) >= self.batching.max_records or self._clock() - batch.first_at >= self.batching.within_s

    def _loop(self, consumer: Consumer) -> None:
        last_empty = False
        while not self.stopping.is_set():
            room = self.batching.max_records - len(self._batch)
            polled = poll_through_outage(consumer, self._poll_timeout_ms(self._batch, last_empty), room,
                                         self.stopping.wait, self.stage)
            if polled is None:
                return  # stopping while the broker was away: the batch in hand is re-read by the next owner
            heal(consumer)
            if self.held:
                self.while_held(consumer)
            last_empty = not polled
            batch = self._batch
            if polled:
                first = not batch
                batch.add(polled, self._clock())
                self.on_polled(consumer, polled, first)
            if self._due(batch, last_empty):
                if not self.handle(consumer, batch):
                    return  # stopping before the sink had the outputs: commit nothing, they are re-read
                self.batches += 1
                self.after_batch(self.commit(consumer))
                self._batch = Batch()

    def commit(self, consumer: Consumer) -> bool:
        """Commit the handled batch's offsets; True when committed.

        A rebalance (or, without `Commits.through_outage`, any Kafka error) leaves the batch to be
        re-read and rejoins the group; with `Commits.through_outage` a broker outage (a retriable
        error) is waited out with backoff, and stopping meanwhile leaves the batch uncommitted.
        A non-retriable error escapes (the process restarts).
        """
        if not self.commits.through_outage:
            try:
                consumer.commit(timeout_ms=self.commits.timeout_ms)
                return True
            except KafkaError as exc:  # the group moved on (a rebalance, a long outage): re-read, at-least-once
                self.commit_failures += 1
                log.warning("%s commit failed, the batch will be re-read: %r", self.stage, exc)
                after_failed_commit(consumer, exc)  # a rebalance: the next poll rejoins
                return False

        def attempt() -> bool:
            consumer.commit(timeout_ms=self.commits.timeout_ms)
            return True

        def retried(exc: KafkaError) -> None:
            self.commit_retries += 1
            self.on_commit_retry(exc)

        try:
            done = retry_through_outage(attempt, self.stopping.wait, f"{self.stage} commit", self.commits.backoff_s,
                                        retried)
        except REBALANCE_ERRORS as exc:  # rebalanced: the new owner re-reads it; this member rejoins
            self.commit_failures += 1
            after_failed_commit(consumer, exc)
            log.warning("%s commit failed (rebalance), the batch will be re-read: %r", self.stage, exc)
            return False
        if done is None:
            log.warning("stopping with a handled %s batch uncommitted: the next owner re-reads it", self.stage)
            return False
        return True


@contextmanager
def stop_on_signals(stop: Callable[[], None], what: str) -> Iterator[None]:
    """SIGTERM / SIGINT call `stop` while the block runs (a loop in the foreground then ends after the work in
    hand); the previous handlers come back after it. The plain-loop workers' (alerts, decode) one stop path."""
    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal %d: stopping the %s", signum, what)
        stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
