"""Per-job engine snapshots on a compacted changelog topic, keyed by job.

Guarantee (the same a Faust table with changelog gives, without shipping every update):
the detect worker acknowledges an internal chunk only AFTER a snapshot that includes its
effect was written and flushed (acks=all). So the committed offset of the partials topic
never runs ahead of the state; a restarted or rebalanced worker restores the newest
snapshot of each job and skips the chunks it already contains (their offsets are in the
snapshot). Nothing is applied twice, nothing is lost, and incident and command ids are
deterministic, so outputs replayed between the last snapshot and a crash repeat the
same ids: no duplicate incident, no second `profile_on`.

Snapshots are data, not pickles (format SLD1, `streams/detect/state/format.py`): each class under a
stable name, its fields by name, arrays as raw bytes, zstd over the whole. The last pickled format (SLS8)
is read once by its migration (`legacy.py`) and the job's next snapshot is SLD1. A snapshot this code
cannot read is ignored with a warning (the job starts afresh).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from infra.clients import bootstrapped, close_quietly, kafka_client_config
from infra.delivery import Record, deliver_all
from infra.settings import Settings
from schemas import encode as encode_event
from schemas import job_key
from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from streams.detect.state import format as snapshot_format
from streams.detect.state import legacy
from streams.detect.state.outbox import HEADER, Outbox, Output, Position
from streams.runtime import read_to_end

Snapshot = tuple[JobEngine, Outbox]

log = logging.getLogger(__name__)

FORMAT = snapshot_format.MAGIC
# every format this code reads: today's, and the last pickled one through its one-time migration
READERS: dict[bytes, Callable[[bytes, DetectionConfig | None], Snapshot]] = {
    snapshot_format.MAGIC: snapshot_format.decode,
    legacy.MAGIC: legacy.decode,
}
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def _sleep(seconds: float) -> bool:
    """The state store waits for the broker for as long as it takes (it never gives up)."""
    time.sleep(seconds)
    return False


def encode(engine: JobEngine, outbox: Outbox | None = None) -> bytes:
    return snapshot_format.encode(engine, outbox)


def decode_snapshot(raw: bytes | None, cfg: DetectionConfig | None = None) -> Snapshot | None:
    """The engine and outbox of a snapshot in a format this code reads (None: the job starts afresh)."""
    if not raw:
        return None
    read = READERS.get(bytes(raw[:4]))
    if read is None:
        log.warning("ignoring a snapshot of format %r", bytes(raw[:4]))
        return None
    try:
        return read(raw, cfg)
    except Exception as exc:  # a corrupt or foreign record on the topic must not stop the worker
        log.warning("ignoring an unreadable snapshot: %s", exc)
        return None


def decode(raw: bytes | None) -> JobEngine | None:
    snap = decode_snapshot(raw)
    return snap[0] if snap is not None else None


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
            self._producer = bootstrapped(KafkaProducer, {
                **kafka_client_config(self._settings, "detect"), "acks": "all", "linger_ms": 0,
                "max_request_size": MAX_SNAPSHOT_BYTES, "compression_type": None})
        return self._producer

    def _deliver(self, records: list[Record], recheck: Callable[[list[int]], list[int]] | None = None) -> list[Any]:
        """Send records in order and wait until the broker has every one (infra/delivery.py);
        outputs must not repeat, so `recheck` filters failed sends that did reach the broker."""
        metas = deliver_all(records, self._producer_, self.close, _sleep, "state/output", recheck)
        assert metas is not None  # _sleep never gives up
        return metas

    def write(self, snapshots: dict[str, bytes]) -> None:
        self._deliver([(self.topic, job.encode(), value, []) for job, value in snapshots.items()])
        self.written += len(snapshots)
        self.bytes_written += sum(len(v) for v in snapshots.values())

    def send_outputs(self, topics: dict[type, str], outputs: list[tuple[bytes, Output]],
                     scan_from: dict[Position, int] | None = None) -> dict[Position, int]:
        """Send outputs in order (acks=all, flushed), each with its outbox id header.

        `scan_from`: where these outputs could land at the earliest (a failed send is looked
        for from there before it is repeated). Returns, per (topic, partition) written, the
        offset after the last record: no later output can land before it.
        """
        if not outputs:
            return {}
        names = sorted(set(topics.values()))

        def not_on_broker(failed: list[int]) -> list[int]:
            while True:
                try:
                    found = self.delivered(names, scan_from or {})
                    break
                except KafkaError as exc:
                    log.warning("output read-back waits for the broker: %r", exc)
                    time.sleep(2.0)
            return [i for i in failed if outputs[i][0] not in found]

        metas = self._deliver([(topics[type(item)], job_key(item.job), encode_event(item), [(HEADER, oid)])
                               for oid, item in outputs], recheck=not_on_broker)
        after: dict[Position, int] = {}
        for meta in metas:
            if meta is None:
                continue
            pos = (meta.topic, meta.partition)
            after[pos] = max(after.get(pos, 0), meta.offset + 1)
        return after

    def end_offsets(self, topics: list[str]) -> dict[Position, int]:
        consumer = self._consumer()
        try:
            parts = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]
            return {(tp.topic, tp.partition): off for tp, off in consumer.end_offsets(parts).items()}
        finally:
            consumer.close()

    def delivered(self, topics: list[str], start: dict[Position, int]) -> set[bytes]:
        """Outbox ids found on `topics` from `start` (partitions not in it: from their beginning) to the end."""
        consumer = self._consumer()
        found: set[bytes] = set()
        try:
            parts = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]
            if not parts:
                return found
            consumer.assign(parts)
            end = consumer.end_offsets(parts)
            for tp in parts:
                offset = start.get((tp.topic, tp.partition))
                if offset is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, min(offset, end[tp]))
            for rec in read_to_end(consumer, parts, end):
                found.update(v for k, v in (rec.headers or ()) if k == HEADER)
            return found
        finally:
            consumer.close()

    def _consumer(self) -> Any:
        """A reader made per restore (every rebalance), perhaps while a broker hangs: `bootstrapped`."""
        return bootstrapped(KafkaConsumer, {**kafka_client_config(self._settings, "detect"),
                                            "enable_auto_commit": False, "group_id": None,
                                            "max_partition_fetch_bytes": MAX_SNAPSHOT_BYTES,
                                            "fetch_max_bytes": MAX_SNAPSHOT_BYTES})

    def load_all(self) -> dict[str, JobEngine]:
        """The newest engine state of every job on the topic."""
        return {job: snap[0] for job, snap in self.load().items()}

    def load(self, cfg: DetectionConfig | None = None) -> dict[str, Snapshot]:
        """The newest snapshot (engine, outbox) of every job on the topic (read to its end), its engines running
        with `cfg` (default: the settings' thresholds)."""
        out: dict[str, Snapshot] = {}
        settings = cfg if cfg is not None else DetectionConfig.of(self._settings)
        for job, raw in self.load_raw().items():
            snap = decode_snapshot(raw, settings)
            if snap is not None:
                out[job] = snap
        return out

    def load_raw(self) -> dict[str, bytes]:
        """The newest snapshot record of every job on the topic, as written (`steplens state`)."""
        consumer = self._consumer()
        try:
            parts = [TopicPartition(self.topic, p) for p in (consumer.partitions_for_topic(self.topic) or set())]
            if not parts:
                return {}
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            end = consumer.end_offsets(parts)
            latest: dict[str, bytes] = {}
            for rec in read_to_end(consumer, parts, end):
                if rec.key is not None:
                    latest[rec.key.decode()] = rec.value
            return latest
        finally:
            consumer.close()

    def close(self) -> None:
        if self._producer is not None:
            close_quietly(self._producer, "state producer")
            self._producer = None
