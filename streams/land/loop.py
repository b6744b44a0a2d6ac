"""The landing consumer as a plain kafka-python thread: Faust's per-message cost off the hot path.

Faust/aiokafka spend ~100 µs of CPU per message (stream events, ack tracking, one asyncio
hop per message); every telemetry message of the fleet passes the landing worker, so it
consumes with kafka-python (C CRC32C) in its own consumer group (`<app_id>-land`), like the
detect worker's decode stage. Delivery, per batch:

1. poll until `sink_batch_size` records (a packed record holds many events) or `sink_batch_seconds` after the first one
   (a batch is one insert per table: an insert has a fixed cost of 10-50 ms in chdb);
2. `LandingProcessor` turns every message into rows or a dead letter (it never raises);
3. dead letters are sent to the dead-letter topic (acks=all), the rows are inserted
   on this thread (`ClickHouseLander.write` retries until they land: while ClickHouse is down
   nothing is committed and lag grows), then the dead-letter sends are confirmed;
4. only then are the batch's offsets committed (`commit()` of the consumed positions, which
   are exactly this batch's ends). A rebalance in between makes the commit fail: the new
   owner re-reads the batch (at-least-once; steps, incidents and jobs collapse under FINAL).
   A broker away (a retriable error: timeout, lost connection, no coordinator) makes the loop
   retry the commit with backoff until the broker is back: the batch is landed already, and
   a worker that exited there would leave the fleet without landing for the whole outage.
   Polls that fail the same way are retried too (`infra.delivery.poll_through_outage`).

Anything escaping a batch (a bug, a dead letter the broker refused) ends the thread with
`failed` set and nothing committed; the app's watchdog then exits the process
(`streams.land.app.crash_process`) and the restart re-reads from the committed offset.
The thread closes the lander when it ends (its chdb session is bound to this thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafka import KafkaProducer
from kafka.errors import KafkaError

from infra.clients import kafka_client_config
from infra.consumer_group import REBALANCE_ERRORS, after_failed_commit, group_consumer, heal
from infra.delivery import OUTAGE_BACKOFF_S, poll_through_outage, retry_through_outage
from infra.settings import Settings
from schemas import Topics
from sinks.rows import TableRow
from sinks.writer import Source
from streams.app import WorkerTimeouts, now_ns
from streams.gc_tuning import tune_gc
from streams.land.processor import Landed, LandingProcessor
from streams.metrics import LandMetrics

log = logging.getLogger(__name__)

# One commit attempt's bound: kafka-python's default (the 30 s request timeout) kept a worker whose broker
# was back waiting out an attempt begun during the outage.
COMMIT_TIMEOUT_MS = 5000


def land_group(settings: Settings) -> str:
    return f"{settings.app_id}-land"


class Record(Protocol):
    """What the loop reads of a kafka-python ConsumerRecord."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class Consumer(Protocol):
    def poll(self, timeout_ms: int = ..., max_records: int | None = ...) -> dict[Any, list[Any]]: ...

    def commit(self, offsets: Any = ..., timeout_ms: int | None = ...) -> None: ...

    def close(self) -> None: ...


class Lander(Protocol):
    """What the loop uses of `streams.land.lander.ClickHouseLander`."""

    def write(self, batch: list[TableRow], sources: list[Source] | None = None) -> None: ...

    def close(self) -> None: ...


class Sender(Protocol):
    def send(self, topic: str, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> Any: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class LandLoop(threading.Thread):
    """Consume, land, commit; see the module docstring for the guarantee."""

    def __init__(
        self,
        settings: Settings,
        processor: LandingProcessor,
        lander: Lander,
        clients: Callable[[], tuple[Consumer, Sender]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        commit_backoff_s: tuple[float, float] = OUTAGE_BACKOFF_S,
        metrics: LandMetrics | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name="steplens-land", daemon=True)
        self.commit_backoff_s = commit_backoff_s
        self.settings = settings
        self.processor = processor
        self.lander = lander
        self.deadletter = Topics(settings.topic_prefix).deadletter
        self._clients = clients or self._kafka_clients
        self._clock = clock
        self._wall_clock = wall_clock
        self.metrics = metrics or LandMetrics()
        self.stopping = threading.Event()
        self.failed: BaseException | None = None
        self.batches = 0
        self.messages = 0
        self.commit_failures = 0
        self.commit_retries = 0

    def _kafka_clients(self) -> tuple[Consumer, Sender]:
        base = kafka_client_config(self.settings, "land")
        size = self.settings.sink_batch_size
        consumer: Any = group_consumer(
            *self.processor.topics, **base, group_id=land_group(self.settings), enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=size, fetch_max_bytes=64 << 20,
            max_partition_fetch_bytes=16 << 20, fetch_min_bytes=1,
            # the workers' group timeouts (6 s session): kafka-python's 45 s default kept a killed land
            # worker's partitions from its restart for 45 s (make chaos, kill_land: recovery 47 s)
            **WorkerTimeouts().kafka_python_consumer())
        producer: Any = KafkaProducer(**base, acks="all", linger_ms=5, batch_size=1 << 20,
                                      max_request_size=4_194_304)
        return consumer, producer

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        tune_gc(self.settings.worker_gc_threshold)
        try:
            consumer, sender = self._clients()
        except BaseException as exc:
            self.failed = exc
            log.exception("land loop could not start")
            return
        try:
            self._run(consumer, sender)
        except BaseException as exc:  # the app's watchdog sees it and exits the process
            self.failed = exc
            log.exception("land loop failed")
        finally:
            for close in (sender.close, consumer.close, self.lander.close):
                try:
                    close()
                except Exception as exc:  # closing is best effort: nothing is committed here
                    log.warning("closing a client failed: %r", exc)

    def _run(self, consumer: Consumer, sender: Sender) -> None:
        size = self.settings.sink_batch_size
        within = self.settings.sink_batch_seconds
        batch: list[Record] = []
        first_at = 0.0
        while not self.stopping.is_set():
            wait = within if not batch else max(0.0, within - (self._clock() - first_at))
            polled = poll_through_outage(consumer, int(wait * 1000), size - len(batch), self.stopping.wait, "land")
            if polled is None:
                return  # stopping while the broker was away: the batch in hand is re-read by the next owner
            heal(consumer)
            if polled:
                if not batch:
                    first_at = self._clock()
                    self.metrics.pending_since.set(self._wall_clock())
                for records in polled.values():
                    batch.extend(records)
                self._export_lag(consumer)
            if batch and (len(batch) >= size or self._clock() - first_at >= within):
                self.land(batch, sender)
                if self.commit(consumer):
                    self.metrics.batches.inc()
                    self.metrics.last_commit.set(self._wall_clock())
                self.metrics.pending_since.set(0)
                batch = []

    def _export_lag(self, consumer: Consumer) -> None:
        """Records behind the partitions' ends, from what the last fetches told the consumer (no request)."""
        try:
            parts = consumer.assignment()  # type: ignore[attr-defined]
            ends = {tp: consumer.highwater(tp) for tp in parts}  # type: ignore[attr-defined]
            lag = sum(max(0, end - consumer.position(tp)) for tp, end in ends.items()  # type: ignore[attr-defined]
                      if end is not None)
        except (AttributeError, KafkaError):  # a test double without them, or positions not known yet
            return
        self.metrics.lag.set(lag)

    def commit(self, consumer: Consumer) -> bool:
        """Commit the landed batch's offsets, waiting out a broker outage (retriable errors, backoff).

        A rebalance (CommitFailedError) leaves the batch to its new owner; stopping meanwhile leaves
        it uncommitted (re-read, collapsed); a non-retriable error escapes (the process restarts).
        True when the offsets are committed.
        """
        def attempt() -> bool:
            consumer.commit(timeout_ms=COMMIT_TIMEOUT_MS)
            return True

        def retried(_: KafkaError) -> None:
            self.commit_retries += 1
            self.metrics.commit_retries.inc()

        try:
            done = retry_through_outage(attempt, self.stopping.wait, "commit after landing", self.commit_backoff_s,
                                        retried)
        except REBALANCE_ERRORS as exc:  # rebalanced: the new owner re-reads it; this member rejoins
            self.commit_failures += 1
            after_failed_commit(consumer, exc)
            log.warning("commit after landing failed (rebalance), the batch will be re-read: %r", exc)
            return False
        if done is None:
            log.warning("stopping with a landed batch uncommitted: the next owner re-reads it")
            return False
        return True

    def land(self, batch: Iterable[Record], sender: Sender) -> None:
        """Rows and dead letters of `batch` stored: returns only once ClickHouse and the broker have them."""
        landed = Landed()
        now = now_ns()
        process = self.processor.process
        count = 0
        for r in batch:
            process(r.topic, r.partition, r.offset, r.key, r.value, now, landed)
            count += 1
        deliveries = []
        for letter in landed.dead:
            log.warning("dead letter %r[%d]@%d: field %r %r", letter.topic, letter.partition,
                        letter.offset, letter.field, letter.problem)
            deliveries.append(sender.send(self.deadletter, value=letter.topic_value(), key=letter.key,
                                          headers=letter.headers()))
        if deliveries:
            sender.flush()
        self.lander.write(landed.rows, landed.sources)
        for delivery in deliveries:  # acks=all: on the dead-letter topic before the offsets are committed
            delivery.get(timeout=300)
        self.batches += 1
        self.messages += count
        self.metrics.messages.inc(count)
        self.metrics.dead_letters.inc(len(landed.dead))
