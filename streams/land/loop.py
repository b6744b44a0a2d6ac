"""The landing consumer as a plain kafka-python thread: Faust's per-message cost off the hot path.

Faust/aiokafka spend ~100 µs of CPU per message (stream events, ack tracking, one asyncio
hop per message); every telemetry message of the fleet passes the landing worker, so it
consumes with kafka-python (C CRC32C) in its own consumer group (`<app_id>-land`), like the
detect worker's decode stage, on the same consumer runtime (`streams/runtime.py`: batching,
commit order, outage and rebalance handling live there). Delivery, per batch:

1. poll until `sink_batch_size` records (a packed record holds many events) or `sink_batch_seconds` after the first one
   (a batch is one insert per table: an insert has a fixed cost of 10-50 ms in chdb);
2. `LandingProcessor.process_batch` turns every message into rows or a dead letter (it never raises),
   a batch's step and device records into one Arrow block per table when the columns vouch for them;
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
`failed` set and nothing committed; the worker then exits the process
(`streams.land.worker.crash_process`) and the restart re-reads from the committed offset.
The thread closes the lander when it ends (its chdb session is bound to this thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafka import KafkaProducer
from kafka.errors import KafkaError

from infra import kafka_records
from infra.backoff import OUTAGE_BACKOFF_S
from infra.clients import bootstrapped, kafka_client_config
from infra.consumer_group import group_consumer
from infra.settings import Settings
from schemas import Topics
from sinks.rows import TableRow
from sinks.writer import Block, Source
from streams.app import WorkerTimeouts, now_ns
from streams.land.processor import Landed, LandingProcessor
from streams.metrics import LandMetrics
from streams.runtime import Batch, Batching, Commits, Consumer, ConsumerLoop, Record

log = logging.getLogger(__name__)

# One commit attempt's bound: kafka-python's default (the 30 s request timeout) kept a worker whose broker
# was back waiting out an attempt begun during the outage.
COMMIT_TIMEOUT_MS = 5000


def land_group(settings: Settings) -> str:
    return f"{settings.app_id}-land"


class Lander(Protocol):
    """What the loop uses of `sinks.lander.ClickHouseLander`."""

    def write(self, batch: list[TableRow], sources: list[Source] | None = None,
              blocks: list[Block] | None = None) -> None: ...

    def close(self) -> None: ...


class Sender(Protocol):
    def send(self, topic: str, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> Any: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def consumer_options(settings: Settings) -> dict[str, Any]:
    """The land consumer's kafka-python options besides the connection's.

    Fetches wait on the broker for `sink_fetch_min_bytes` (or `sink_fetch_max_wait_ms`, kept within a
    quarter of the batch window): a batch gathers for `sink_batch_seconds` anyway, and with kafka-python's
    `fetch_min_bytes=1` every poll of a filling batch was a fetch answered at once with the few records
    that had come in, which cost the broker ~3x the CPU per event of everything else it serves
    (`bench.throughput` at 4,096 ranks: broker 45.7 -> 14.5 CPU-µs/event, BENCHMARKS.md).
    """
    return {
        "enable_auto_commit": False, "auto_offset_reset": "earliest", "max_poll_records": settings.sink_batch_size,
        "fetch_max_bytes": 64 << 20, "max_partition_fetch_bytes": 16 << 20,
        "fetch_min_bytes": settings.sink_fetch_min_bytes,
        "fetch_max_wait_ms": max(1, min(settings.sink_fetch_max_wait_ms, int(settings.sink_batch_seconds * 250))),
        # the workers' group timeouts (6 s session): kafka-python's 45 s default kept a killed land
        # worker's partitions from its restart for 45 s (make chaos, kill_land: recovery 47 s)
        **WorkerTimeouts().kafka_python_consumer(),
    }


class LandLoop(ConsumerLoop):
    """Consume, land, commit on the consumer runtime (`streams/runtime.py`); see the module docstring."""

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
        # a landed batch's commit waits out a broker outage: a worker that exited there would leave the
        # fleet without landing for the whole outage
        super().__init__("land", Batching(settings.sink_batch_size, settings.sink_batch_seconds, accumulate=True),
                         Commits(through_outage=True, timeout_ms=COMMIT_TIMEOUT_MS, backoff_s=commit_backoff_s),
                         gc_threshold=settings.worker_gc_threshold, clock=clock)
        self.settings = settings
        self.processor = processor
        self.lander = lander
        self.deadletter = Topics(settings.topic_prefix).deadletter
        self._clients = clients or self._kafka_clients
        self._wall_clock = wall_clock
        self._sender: Sender | None = None
        self.metrics = metrics or LandMetrics()
        self.messages = 0

    def _kafka_clients(self) -> tuple[Consumer, Sender]:
        kafka_records.install()  # fetched batches read in C: ~0.45 µs an event less (infra/kafka_records.py)
        base = kafka_client_config(self.settings, "land")
        consumer: Any = group_consumer(*self.processor.topics, **base, group_id=land_group(self.settings),
                                       listener=self.revocations, **consumer_options(self.settings))
        producer: Any = bootstrapped(KafkaProducer, {**base, "acks": "all", "linger_ms": 5, "batch_size": 1 << 20,
                                                     "max_request_size": 4_194_304})
        return consumer, producer

    def open_consumer(self) -> Consumer:
        consumer, self._sender = self._clients()
        return consumer

    def close_clients(self, consumer: Consumer | None) -> None:
        opened = [client.close for client in (self._sender, consumer) if client is not None]
        for close in [*opened, self.lander.close]:
            try:
                close()
            except Exception as exc:  # closing is best effort: nothing is committed here
                log.warning("closing a client failed: %r", exc)

    def on_polled(self, consumer: Consumer, polled: dict[Any, list[Any]], first: bool) -> None:
        if first:
            self.metrics.pending_since.set(self._wall_clock())
        self._export_lag(consumer)

    def after_batch(self, committed: bool) -> None:
        if committed:
            self.metrics.batches.inc()
            self.metrics.last_commit.set(self._wall_clock())
        self.metrics.pending_since.set(0)

    def on_commit_retry(self, exc: KafkaError) -> None:
        self.metrics.commit_retries.inc()

    def _export_lag(self, consumer: Any) -> None:
        """Records behind the partitions' ends, from what the last fetches told the consumer (no request)."""
        try:
            parts = consumer.assignment()
            ends = {tp: consumer.highwater(tp) for tp in parts}
            lag = sum(max(0, end - consumer.position(tp)) for tp, end in ends.items() if end is not None)
        except (AttributeError, KafkaError):  # a test double without them, or positions not known yet
            return
        self.metrics.lag.set(lag)

    def handle(self, consumer: Consumer, batch: Batch) -> bool:
        assert self._sender is not None
        self.land(batch.records, self._sender)
        return True

    def land(self, batch: Iterable[Record], sender: Sender) -> None:
        """Rows and dead letters of `batch` stored: returns only once ClickHouse and the broker have them."""
        landed = Landed()
        records = list(batch)
        self.processor.process_batch(records, now_ns(), landed)
        count = len(records)
        deliveries = []
        for letter in landed.dead:
            log.warning("dead letter %r[%d]@%d: field %r %r", letter.topic, letter.partition,
                        letter.offset, letter.field, letter.problem)
            deliveries.append(sender.send(self.deadletter, value=letter.topic_value(), key=letter.key,
                                          headers=letter.headers()))
        if deliveries:
            sender.flush()
        self.lander.write(landed.rows, landed.sources, landed.blocks)
        for delivery in deliveries:  # acks=all: on the dead-letter topic before the offsets are committed
            delivery.get(timeout=300)
        self.messages += count
        self.metrics.messages.inc(count)
        self.metrics.dead_letters.inc(len(landed.dead))
