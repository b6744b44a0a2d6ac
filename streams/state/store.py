"""Per-job engine snapshots on a compacted changelog topic, keyed by job.

Guarantee (the same a Faust table with changelog gives, without shipping every update):
the detect worker acknowledges an internal chunk only AFTER a snapshot that includes its
effect was written and flushed (acks=all). So the committed offset of the partials topic
never runs ahead of the state; a restarted or rebalanced worker restores the newest
snapshot of each job and skips the chunks it already contains (their offsets are in the
snapshot). Nothing is applied twice, nothing is lost, and incident and command ids are
deterministic, so outputs replayed between the last snapshot and a crash repeat the
same ids: no duplicate incident, no second `profile_on`.

Snapshots are pickled engine objects: the topic is internal to the detect workers
(never a contract), written and read only by the same code version. A snapshot whose
version does not match is ignored (the job starts afresh).
"""

from __future__ import annotations

import logging
import pickle
import zlib
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.clients import kafka_client_config
from steplens.config import Settings
from streams.engine import JobEngine

log = logging.getLogger(__name__)

FORMAT = b"SLS1"
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def encode(engine: JobEngine) -> bytes:
    return FORMAT + zlib.compress(pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL), 1)


def decode(raw: bytes) -> JobEngine | None:
    if not raw or not raw.startswith(FORMAT):
        return None
    try:
        engine = pickle.loads(zlib.decompress(raw[len(FORMAT):]))
    except Exception:
        log.warning("ignoring an unreadable snapshot")
        return None
    return engine if isinstance(engine, JobEngine) else None


class SnapshotStore:
    """Writes snapshots synchronously (flush before the caller acks) and reads them all back."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self._settings = settings
        self.topic = topic
        self._producer: Any = None
        self.written = 0
        self.bytes_written = 0

    def _producer_(self) -> Any:
        if self._producer is None:
            self._producer = KafkaProducer(**kafka_client_config(self._settings, "detect"), acks="all",
                                           linger_ms=0, max_request_size=MAX_SNAPSHOT_BYTES,
                                           compression_type=None)
        return self._producer

    def write(self, snapshots: dict[str, bytes]) -> None:
        producer = self._producer_()
        futures = [producer.send(self.topic, key=job.encode(), value=value) for job, value in snapshots.items()]
        producer.flush()
        for future in futures:
            future.get(timeout=30)
        self.written += len(snapshots)
        self.bytes_written += sum(len(v) for v in snapshots.values())

    def load_all(self) -> dict[str, JobEngine]:
        """The newest snapshot of every job on the topic (read to its end)."""
        consumer = KafkaConsumer(**kafka_client_config(self._settings, "detect"), enable_auto_commit=False,
                                 group_id=None, max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES,
                                 fetch_max_bytes=MAX_SNAPSHOT_BYTES)
        try:
            parts = [TopicPartition(self.topic, p) for p in (consumer.partitions_for_topic(self.topic) or set())]
            if not parts:
                return {}
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            end = consumer.end_offsets(parts)
            latest: dict[str, bytes] = {}
            while any(consumer.position(p) < end[p] for p in parts):
                for records in consumer.poll(timeout_ms=1000).values():
                    for rec in records:
                        if rec.key is not None:
                            latest[rec.key.decode()] = rec.value
            out: dict[str, JobEngine] = {}
            for job, raw in latest.items():
                engine = decode(raw)
                if engine is not None:
                    out[job] = engine
            return out
        finally:
            consumer.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
