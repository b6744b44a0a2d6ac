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
version does not match is ignored (the job starts afresh). They are compressed with zstd at
one of its fast levels (`ZSTD_LEVEL`): a 6,400-rank job's 12.3 MB pickle compresses in ~5 ms to
2.1 MB, where level 1 took ~11 ms for 1.8 MB and zlib at level 1 ~8x longer (the snapshot,
encoded under the worker's lock about once a second, is ~10 % of the detect engine's CPU at
6,400 ranks). Any zstd level reads the same. SLS6 snapshots (the same pickle, zlib) still restore.
Pickle names each class by its module path, so a module that moves without a format change is
listed in `MOVED_MODULES`: snapshots written before the detect stage moved under streams/detect/
still restore.
"""

from __future__ import annotations

import io
import logging
import pickle
import time
import zlib
from collections.abc import Callable
from typing import Any, cast

import zstandard
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from infra.clients import bootstrapped, close_quietly, kafka_client_config
from infra.delivery import Record, deliver_all
from infra.settings import Settings
from schemas import encode as encode_event
from schemas import job_key
from streams.detect.combine.chunks import KernelChunk
from streams.detect.engine import JobEngine
from streams.detect.ingest.decode import add_summary, new_kernel_chunk
from streams.detect.state.outbox import HEADER, Outbox, Output, Position
from streams.detect.windows.step_frames import NameTable
from streams.runtime import read_to_end

Snapshot = tuple[JobEngine, Outbox]

log = logging.getLogger(__name__)

# SLS8: frames hold kernel summaries as columns (step_frames.KernelRows) and the job their names; SLS7: SLS6's
# pickle, zstd-compressed; SLS6: engines keep their pairs' gaps (slow_pair)
FORMAT = b"SLS8"
# every format this code reads -> how its pickle is compressed (SLS5 and older are ignored)
DECOMPRESS: dict[bytes, Callable[[bytes], bytes]] = {
    b"SLS8": lambda data: zstandard.ZstdDecompressor().decompress(data),
    b"SLS7": lambda data: zstandard.ZstdDecompressor().decompress(data),
    b"SLS6": zlib.decompress,
}
ROW_SHAPED = (b"SLS7", b"SLS6")  # formats whose open frames hold row-shaped summaries: `upgrade_kernels`
# a row-shaped summary's aggregate: a list of these fields
ROW_FIELDS = ("key", "cat", "count", "total_ns", "flops", "bytes", "domain", "launch_mean_us", "launch_mad_us",
               "direction", "max_ns")
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
# zstd's fast mode: half level 1's CPU for ~16 % more bytes on the state topic (bench/results/snapshot.json)
ZSTD_LEVEL = -5

# Where the classes of snapshots written by older code live now (module or package, old -> new):
# the detect stage moved from the streams/ root into streams/detect/ with FORMAT SLS6 unchanged. A module split
# into a package of the same name (streams/detect/signals/) re-exports its pickled classes from the package instead.
MOVED_MODULES: dict[str, str] = {
    "streams.engine": "streams.detect.engine",
    "streams.signals": "streams.detect.signals",
    "streams.analysis.advisor": "streams.advice",
    "streams.detect.advice": "streams.advice",
    **{f"streams.{p}": f"streams.detect.{p}"
       for p in ("combine", "incidents", "ingest", "rules", "scopes", "state", "windows")},
}


def current_module(module: str) -> str:
    """The module path a class pickled under `module` has now (`module` itself when it never moved)."""
    for old, new in MOVED_MODULES.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old):]
    return module


class SnapshotUnpickler(pickle.Unpickler):
    """Reads a snapshot, finding classes pickled under a module path that has since moved."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(current_module(module), name)


def _sleep(seconds: float) -> bool:
    """The state store waits for the broker for as long as it takes (it never gives up)."""
    time.sleep(seconds)
    return False


def encode(engine: JobEngine, outbox: Outbox | None = None) -> bytes:
    state = (engine, outbox if outbox is not None else Outbox(engine.job))
    raw = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    return FORMAT + zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)


def decode_snapshot(raw: bytes | None) -> Snapshot | None:
    if not raw:
        return None
    decompress = DECOMPRESS.get(bytes(raw[:4]))
    if decompress is None:
        return None
    try:
        state = SnapshotUnpickler(io.BytesIO(decompress(raw[4:]))).load()
    except Exception:
        log.warning("ignoring an unreadable snapshot")
        return None
    if (not isinstance(state, tuple) or len(state) != 2 or not isinstance(state[0], JobEngine)
            or not isinstance(state[1], Outbox)):
        return None
    if bytes(raw[:4]) in ROW_SHAPED:
        upgrade_kernels(state[0])
    return state[0], state[1]


def upgrade_kernels(engine: JobEngine) -> None:
    """An engine restored from SLS7 or older: its open frames' row-shaped kernel summaries ([rank, aggregates,
    other_ns], each aggregate a list of `ROW_FIELDS`) as the columns this code reads, named in a job's table."""
    job: JobEngine | None = engine
    while job is not None:
        frames = job.frames
        if getattr(frames, "names", None) is None:
            frames.names = NameTable()
        for frame in frames.frames.values():
            old: list[Any] = list(frame.kernels)
            if not old or not isinstance(old[0], tuple):
                continue
            chunk = new_kernel_chunk(job.job, 0, 0)
            for rank, aggregates, other_ns in old:
                add_summary(chunk, rank, frame.step, other_ns,
                            [dict(zip(ROW_FIELDS, a, strict=False)) for a in aggregates])
            frame.kernels = [frames.names.rows(cast(KernelChunk, chunk))]
            frame.comm = None
        job = job.previous


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

    def load(self) -> dict[str, Snapshot]:
        """The newest snapshot (engine, outbox) of every job on the topic (read to its end)."""
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
            out: dict[str, Snapshot] = {}
            for job, raw in latest.items():
                snap = decode_snapshot(raw)
                if snap is not None:
                    out[job] = snap
            return out
        finally:
            consumer.close()

    def close(self) -> None:
        if self._producer is not None:
            close_quietly(self._producer, "state producer")
            self._producer = None
