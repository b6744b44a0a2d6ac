"""Landing, the pure half: a Kafka message in, a ClickHouse row or a dead letter out.

Each input topic carries one event type; on the raw telemetry topics a record may pack an
array of events (contract 1.2), each landed or dead-lettered on its own (`[index]` in its
reason). `LandingProcessor.process` is total: whatever a message holds (garbage, a
tombstone, a value out of range, an event type without a table
yet, or a bug the checks did not foresee) it yields exactly one of

- a row for the event's table (`rows.row_for`, the one mapping point), or
- a dead letter: the raw bytes kept, with the reason, for the dead-letter topic and the
  dead_letters table,

and never raises, so one bad message can never stop the batch it arrived in.

Steps, kernel summaries and device samples (three messages per rank per second) first try
`sinks.fast_rows`, which maps the plain shape of a current-version event from the orjson
dict in a few µs; anything else, every out-of-contract message included, takes the full
contract decoder, which lands it or dead-letters it with its reason. `process_batch` first tries a
batch's step, kernel-summary and device records as one columnar read (`streams.land.columns`): one
Arrow block per table, the same rows, no tuple per event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from schemas import (
    ContractError,
    ControlCommand,
    DeviceSample,
    Incident,
    JobEvent,
    KernelBatch,
    KernelSummary,
    MitigationAction,
    ProfileReady,
    StepEvent,
    Topics,
    split_record,
)
from schemas.codec import decode_mapping
from schemas.dead_letter import DeadLetter
from schemas.errors import MAX_REASON_CHARS, clip
from schemas.packing import MAX_PACKED_EVENTS, PACKED_TOPIC_TYPES
from sinks import rows
from sinks.fast_rows import FAST_ROWS, FastMapping
from sinks.rows import (
    DEVICE_SAMPLE_COLUMNS,
    DEVICE_SAMPLES_TABLE,
    KERNEL_SUMMARIES_TABLE,
    KERNEL_SUMMARY_COLUMNS,
    STEP_COLUMNS,
    STEPS_TABLE,
    RowError,
    TableRow,
)
from sinks.writer import Block, Span
from streams.columnar_backoff import ColumnarBackoff
from streams.land.columns import device_block, kernel_summaries_in, kernel_summary_block, step_block
from streams.runtime import Record

UNEXPECTED_FIELD = "<processing>"

Source = tuple[str, int, int]  # (topic, partition, offset): the insert deduplication token's parts


@dataclass(slots=True)
class Landed:
    rows: list[TableRow] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)  # parallel to `rows`: the message each came from
    blocks: list[Block] = field(default_factory=list)  # rows of whole batches, as Arrow tables (columnar path)


def _one_row_each(data: Any) -> int:
    """Events in a block of a type that lands one row per event."""
    return int(data.num_rows)


# event type -> (its table, columns, the columnar reader of a batch of its records, the events of a block)
_COLUMNAR: dict[str, tuple[str, tuple[str, ...], Callable[[list[bytes], int], Any], Callable[[Any], int]]] = {
    "step": (STEPS_TABLE, STEP_COLUMNS, step_block, _one_row_each),
    "device": (DEVICE_SAMPLES_TABLE, DEVICE_SAMPLE_COLUMNS, device_block, _one_row_each),
    "kernel_summary": (KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS, kernel_summary_block, kernel_summaries_in),
}


def landing_types(topics: Topics) -> dict[str, type[Any]]:
    """Every topic the landing worker reads, with the one event type it carries."""
    return {
        topics.steps: StepEvent,
        topics.kernel_summaries: KernelSummary,
        topics.kernels: KernelBatch,
        topics.device: DeviceSample,
        topics.profiles: ProfileReady,
        topics.jobs: JobEvent,
        topics.incidents: Incident,
        topics.control: ControlCommand,
        topics.actions: MitigationAction,
    }


def _as_bytes(value: object) -> bytes | None:
    """A key or value as bytes (Kafka gives bytes; anything else is kept as its repr)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return repr(value).encode("utf-8", "backslashreplace")


def _element_bytes(element: Any) -> bytes:
    """One element of a packed record as its own JSON (what its dead letter keeps)."""
    try:
        return orjson.dumps(element)
    except Exception:  # cannot happen for parsed JSON; keep something rather than fail
        return repr(element).encode("utf-8", "backslashreplace")


class LandingProcessor:
    """Decode-and-map for the topics the landing worker consumes (no I/O, time passed in).

    `counts` has one entry per event type landed, plus ``dead``; after any sequence of
    `process` calls, the sum of the counts equals the number of events (an array record's
    elements each count) plus the records dead-lettered whole.
    """

    def __init__(self, topics: Topics, max_event_bytes: int, *, fast: bool = True, columnar: bool = True) -> None:
        """`fast=False` sends every message through the full contract decoder (tests of that path);
        `columnar=False` makes `process_batch` land every message on its own (the reference)."""
        self._max = max_event_bytes
        self._types = landing_types(topics)
        self._fast: dict[str, tuple[FastMapping, str]] = {
            topic: (FAST_ROWS[cls.TYPE], cls.TYPE)
            for topic, cls in self._types.items()
            if fast and cls.TYPE in FAST_ROWS
        }
        self._columnar = {topic: _COLUMNAR[cls.TYPE] for topic, cls in self._types.items()
                          if fast and columnar and cls.TYPE in _COLUMNAR}
        self._backoff = {topic: ColumnarBackoff() for topic in self._columnar}
        self.declined = 0  # batches (per topic) the columnar path read and handed back
        self.counts: dict[str, int] = {}

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic this processor lands."""
        return tuple(self._types)

    def process(
        self, topic: str, partition: int, offset: int, key: object, raw: object, now_ns: int, out: Landed
    ) -> None:
        """Append the rows of every event of one record, or dead letters, to `out` (with their sources).

        A record is one event (an object) or, on the raw telemetry topics, an array of them
        (contract 1.2): each element lands or is dead-lettered on its own, its reason prefixed
        with its index; a whole-record problem is one dead letter for the whole record.
        """
        fast = self._fast.get(topic)
        if fast is not None and type(raw) is bytes and len(raw) <= self._max:
            try:
                doc = orjson.loads(raw)
            except orjson.JSONDecodeError:
                doc = None
            if type(doc) is dict:
                mapped_fast = fast[0](doc, now_ns)
                if mapped_fast is not None:
                    self._rows(mapped_fast, fast[1], (topic, partition, offset), out)
                    return
            elif type(doc) is list and 0 < len(doc) <= MAX_PACKED_EVENTS:
                self._packed(topic, partition, offset, key, doc, fast, now_ns, out)
                return
        key_bytes = _as_bytes(key)
        raw_bytes = _as_bytes(raw)
        try:
            cls = self._types.get(topic)
            if cls is None:
                raise ContractError("<topic>", f"topic {topic[:100]!r} is not one the landing worker reads")
            elements, packed = split_record(raw_bytes, self._max)
            if packed and cls.TYPE not in PACKED_TOPIC_TYPES:
                raise ContractError("<payload>", f"{cls.TYPE!r} events are one JSON object per record, got an array")
        except ContractError as exc:
            self._dead(topic, partition, offset, key_bytes, raw_bytes, exc.field, exc.problem, now_ns, out)
            return
        except Exception as exc:  # a bug must not cost the message: dead-letter it with the reason
            problem = clip(f"could not be processed ({type(exc).__name__}: {exc})", MAX_REASON_CHARS)
            self._dead(topic, partition, offset, key_bytes, raw_bytes, UNEXPECTED_FIELD, problem, now_ns, out)
            return
        if not packed:
            self._element(cls, elements[0], None, topic, partition, offset, key_bytes, raw_bytes, now_ns, out)
            return
        for index, doc in enumerate(elements):
            self._element(cls, doc, index, topic, partition, offset, key_bytes, None, now_ns, out)

    def process_batch(self, batch: Sequence[Record], now_ns: int, out: Landed) -> None:
        """`process` for every message of `batch`, in order, except that a topic's messages that read to
        one Arrow block (`streams.land.columns`) land as that block in `out.blocks`, sourced by each
        partition's offset span: the same rows and tokens, no row per event. A topic whose messages the
        columnar reader cannot vouch for lands message by message, as `process` does, and so do that
        topic's next `ColumnarBackoff.skip` batches (a declined read is paid for nothing)."""
        held: dict[str, list[Record]] = {}
        if self._columnar:
            for message in batch:
                if message.topic in self._columnar:
                    held.setdefault(message.topic, []).append(message)
        done: set[str] = set()
        for topic, messages in held.items():
            backoff = self._backoff[topic]
            if not backoff.use():
                continue
            if self._block(topic, messages, now_ns, out):
                done.add(topic)
            else:
                self.declined += 1
                backoff.declined()
        for m in batch:
            if m.topic not in done:
                self.process(m.topic, m.partition, m.offset, m.key, m.value, now_ns, out)

    def _block(self, topic: str, messages: list[Record], now_ns: int, out: Landed) -> bool:
        """Land `messages` (one topic's, in consumed order) as one block; False: not sure, nothing landed."""
        raws: list[bytes] = []
        spans: dict[tuple[str, int], list[int]] = {}
        for m in messages:
            raw = m.value
            if type(raw) is not bytes or len(raw) > self._max:
                return False
            raws.append(raw)
            span = spans.get((m.topic, m.partition))
            if span is None:
                spans[(m.topic, m.partition)] = [m.offset, m.offset]
            else:
                span[1] = m.offset
        table, columns, read, events = self._columnar[topic]
        data = read(raws, now_ns)
        if data is None:
            return False
        block_spans: tuple[Span, ...] = tuple((t, p, first, last) for (t, p), (first, last) in spans.items())
        out.blocks.append(Block(table, columns, data, block_spans))
        kind = self._types[topic].TYPE
        self.counts[kind] = self.counts.get(kind, 0) + events(data)
        return True

    def _packed(self, topic: str, partition: int, offset: int, key: object, docs: list[Any],
                fast: tuple[FastMapping, str], now_ns: int, out: Landed) -> None:
        """An array record: the fast mapping per element, the full decoder for the elements it declines."""
        source = (topic, partition, offset)
        mapping, kind = fast
        cls = self._types[topic]
        for index, doc in enumerate(docs):
            mapped = mapping(doc, now_ns) if type(doc) is dict else None
            if mapped is not None:
                self._rows(mapped, kind, source, out)
            else:
                self._element(cls, doc, index, topic, partition, offset, _as_bytes(key), None, now_ns, out)

    def _element(self, cls: type[Any], doc: Any, index: int | None, topic: str, partition: int, offset: int,
                 key: bytes | None, raw: bytes | None, now_ns: int, out: Landed) -> None:
        """One event (element `index` of an array, or a whole record when None) through the full decoder.

        Its rows land, or it is dead-lettered with its reason (prefixed ``[index]``); a dead
        element keeps its own JSON as payload (`raw` None), a whole record its bytes.
        """
        prefix = "" if index is None else f"[{index}] "
        try:
            event = decode_mapping(doc)
            if not isinstance(event, cls):
                raise ContractError("type", f"this topic carries {cls.TYPE!r} events, got {type(event).TYPE!r}")
            mapped = rows.rows_for(event, now_ns)
        except (ContractError, RowError) as exc:
            field_path, problem = exc.field, clip(prefix + exc.problem, MAX_REASON_CHARS)
        except Exception as exc:  # a bug must not cost the event: dead-letter it with the reason
            field_path = UNEXPECTED_FIELD
            problem = clip(f"{prefix}could not be processed ({type(exc).__name__}: {exc})", MAX_REASON_CHARS)
        else:
            self._rows(mapped, cls.TYPE, (topic, partition, offset), out)
            return
        payload = raw if raw is not None else _element_bytes(doc)
        self._dead(topic, partition, offset, key, payload, field_path, problem, now_ns, out)

    def _rows(self, mapped: list[TableRow], kind: str, source: Source, out: Landed) -> None:
        out.rows.extend(mapped)
        out.sources.extend([source] * len(mapped))
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _dead(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None,
        field_path: str, problem: str, now_ns: int, out: Landed,
    ) -> None:
        payload = b"" if raw is None else raw
        out.dead.append(DeadLetter(topic, partition, offset, key, payload, field_path, problem, raw is None))
        out.rows.append(rows.dead_letter(topic, partition, offset, key, payload, problem, field_path, now_ns))
        out.sources.append((topic, partition, offset))
        self.counts["dead"] = self.counts.get("dead", 0) + 1
