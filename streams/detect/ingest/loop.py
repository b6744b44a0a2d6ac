"""The decode stage as a plain kafka-python consumer: the hot path without per-message Faust cost.

Faust/aiokafka spend ~100 µs of CPU per message (event objects, ack tracking); a plain
kafka-python consumer with orjson and numpy costs ~15–25 µs. Every event passes here, so
this stage runs once per detect worker (a child process by default: streams/detect/ingest/process.py; or a
thread), in its own consumer group (`<app_id>-detect-decode`): poll up to `batch_max` messages →
`decode_batch` → one chunk per (job, kind) to the partials topic (keyed by job) → flush → commit. Offsets are
committed only after the chunks are on the broker (acks=all): at-least-once; a replayed
chunk overwrites the same ranks in their frame, or is counted late. Each chunk says how far
behind the input the stage is (`behind_ns`, `lag`): while it is behind, frames do not time
out (a backlog is not a hang). The loop itself (batching, commit order, outages, rebalances)
is the consumer runtime's (`streams/runtime.py`), shared with the land worker.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from infra import kafka_records
from infra.clients import bootstrapped, close_quietly, kafka_client_config
from infra.consumer_group import group_consumer
from infra.delivery import deliver_all
from infra.settings import Settings
from schemas import Topics, job_key
from streams.app import WorkerTimeouts
from streams.columnar_backoff import ColumnarBackoff
from streams.detect.combine import chunks as chunk_codec
from streams.detect.config import DetectionConfig
from streams.detect.ingest.decode import decode_batch
from streams.metrics import DetectMetrics
from streams.runtime import Batch, Batching, Commits, Consumer, ConsumerLoop
from streams.topics_admin import DetectTopics

log = logging.getLogger(__name__)
COMMIT_TIMEOUT_MS = 30_000  # a commit that cannot finish (group gone) is given up: the batch is re-read
STALLED_EVERY_S = 1.0  # while a rebalance stalls the decode stage, how often the engines are told so


def backlog(consumer: Any, polled: dict[Any, Any]) -> tuple[int, bool]:
    """(records waiting in the assigned partitions, starved) after a poll.

    Starved: some assigned partition is behind and gave nothing to this poll, or has not been
    fetched since it was assigned (no highwater yet: its backlog is unknown, not zero). Either
    way the batch says nothing about that partition's ranks, and the engine must not release
    their frames on a timeout or the open-frame cap. (One `make demo` run, whose decode group
    rebalanced while the job was being sent, released 56 of its 120 frames incomplete, 120
    minus the cap of 64, with 1,736 late reports: an unfetched partition counted as caught up.)
    """
    lag = 0
    starved = False
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is None:
            starved = True
            continue
        behind = max(0, high - consumer.position(tp))
        lag += behind
        starved = starved or (behind > 0 and tp not in polled)
    return lag, starved


def decode_group(settings: Settings) -> str:
    return f"{settings.app_id}-detect-decode"


def input_topics(topics: Topics) -> tuple[str, ...]:
    return (topics.steps, topics.kernel_summaries, topics.device, topics.jobs)


class DecodeLoop(ConsumerLoop):
    """Decode each polled batch into chunks on the partials topic, on the consumer runtime."""

    def __init__(self, settings: Settings, metrics: DetectMetrics) -> None:
        cfg = DetectionConfig.of(settings)
        # a batch: a non-empty poll and the polls bringing more within batch_gather_s (its latency is detection's)
        # a commit that cannot finish is given up: the batch is re-read (the engine absorbs repeated chunks)
        super().__init__("decode", Batching(cfg.batch_max, cfg.batch_within_s, accumulate=False,
                                            gather_s=cfg.batch_gather_s),
                         Commits(through_outage=False, timeout_ms=COMMIT_TIMEOUT_MS),
                         gc_threshold=settings.worker_gc_threshold)
        self.settings = settings
        self.metrics = metrics
        self.topics = Topics(settings.topic_prefix)
        self.partials = DetectTopics(settings.topic_prefix).partials
        self._out: Any = None  # the chunk producer, replaced after a failed delivery
        self._columnar = ColumnarBackoff()  # event by event for a while after the columnar read declined a batch
        self._stalled_sent = 0.0  # monotonic time of the last stalled chunks

    def _producer(self) -> Any:
        if self._out is None:
            # made again after a failed delivery, when a broker may hang: a bounded bootstrap per try
            self._out = bootstrapped(KafkaProducer, {**kafka_client_config(self.settings, "detect"), "acks": "all",
                                                     "linger_ms": 5, "batch_size": 1 << 20,
                                                     "max_request_size": 16 << 20})
        return self._out

    def _drop_producer(self) -> None:
        if self._out is not None:
            close_quietly(self._out, "decode producer")
            self._out = None

    def _deliver(self, records: list[tuple[bytes, bytes]]) -> bool:
        """Every chunk on the broker before the input is committed, however long the broker is away.

        A broker restart must only delay detection: expired sends are sent again (a chunk
        that did reach the broker is then there twice; the engine replaces a rank's repeated
        report, at-least-once), by a fresh producer (an idempotent producer whose batches
        expired can stay wedged after the broker is back). False: the worker stops first.
        """
        sent = deliver_all([(self.partials, key, value, None) for key, value in records], self._producer,
                           self._drop_producer, self.stopping.wait, "decode")
        return sent is not None

    def while_held(self, consumer: Consumer) -> None:
        """A rebalance of the decode group stalls every member for its duration (seconds on a busy box; longer
        when partitions were added) and no chunk says so: the engines took the silence for a current input and
        released frames incomplete, the stalled ranks' reports late (a transient HUNG_RANK). Each second of it,
        one stalled chunk (`chunks.StalledChunk`) to every partials partition (no wait for acknowledgements: a
        lost one only shortens the engines' grace)."""
        now = time.monotonic()
        if now - self._stalled_sent < STALLED_EVERY_S:
            return
        self._stalled_sent = now
        try:
            out = self._producer()
            value = chunk_codec.dumps(chunk_codec.stalled(time.time_ns()))
            for partition in sorted(out.partitions_for(self.partials) or ()):
                out.send(self.partials, value=value, partition=partition)
        except KafkaError as exc:  # the broker away: the engines' own staleness rules apply
            log.warning("decode could not tell the engines it is stalled by a rebalance: %r", exc)

    def open_consumer(self) -> Consumer:
        kafka_records.install()  # fetched batches read in C: ~0.45 µs an event less (infra/kafka_records.py)
        consumer: Consumer = group_consumer(
            **kafka_client_config(self.settings, "detect"), group_id=decode_group(self.settings),
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.batching.max_records,
            fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20, **WorkerTimeouts().kafka_python_consumer())
        return consumer

    def close_clients(self, consumer: Consumer | None) -> None:
        self._drop_producer()
        if consumer is not None:
            consumer.close()

    def ready(self, consumer: Consumer) -> bool:
        """Subscribe only once every input topic has partitions in the metadata: a group member
        that joins before a fresh topic reaches the metadata is assigned nothing, and the
        rebalance that follows when it appears could leave the loop idle (seen in tests)."""
        kafka: Any = consumer
        waiting = list(input_topics(self.topics))
        since = time.monotonic()
        while waiting:
            waiting = [t for t in waiting if not kafka.partitions_for_topic(t)]
            if not waiting:
                break
            if time.monotonic() - since > 10:
                log.warning("decode waits for input topics in the broker's metadata: %s", ", ".join(waiting))
                since = time.monotonic()
            if self.stopping.wait(0.5):
                return False
        kafka.subscribe(list(input_topics(self.topics)), listener=self.revocations)
        return True

    def handle(self, consumer: Consumer, batch: Batch) -> bool:
        raws: list[bytes] = []
        newest_ms: list[int] = []
        for tp, records in batch.polled.items():
            self.metrics.events_in.labels(tp.topic).inc(len(records))
            raws.extend(r.value for r in records)
            newest_ms.append(max(r.timestamp for r in records))
        lag, starved = backlog(consumer, batch.polled)
        # how far behind the input this batch is: the slowest polled partition's newest record
        behind_ns = max(0, time.time_ns() - min(newest_ms) * 1_000_000) if newest_ms else 0
        self.metrics.batch.labels("decode").observe(len(raws))
        columnar = self.settings.detect_columnar_decode and self._columnar.use()
        chunks, stats = decode_batch(raws, self.settings.max_event_bytes, columnar)
        self._columnar.after(stats.declined)
        self.metrics.bad.inc(stats.bad)
        out: list[tuple[bytes, bytes]] = []
        decoded_ns = time.time_ns()
        for chunk in chunks:
            job = chunk.get("job") or ""
            if not job:
                continue  # device samples with no job: landed, not analysed
            chunk["behind_ns"] = behind_ns
            chunk["decoded_ns"] = decoded_ns
            chunk["lag"] = lag
            chunk["starved"] = starved
            out.extend((job_key(job), value) for value in chunk_codec.dumps_split(chunk))
        if not self._deliver(out):
            return False  # stopping before the chunks were on the broker: commit nothing, they are re-read
        self.metrics.events_out.labels(self.partials).inc(len(out))
        return True
