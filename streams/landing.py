"""Landing, the pure half: a Kafka message in, ClickHouse rows or a dead letter out.

Each input topic carries one event type. A message that does not decode, or whose values
do not fit their columns, is not lost: it becomes a dead letter (raw bytes kept, with the
reason) for the dead-letter topic and the dead_letters table, and the worker goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas import (
    ContractError,
    ControlCommand,
    DeviceSample,
    Incident,
    JobEvent,
    KernelBatch,
    KernelSummary,
    ProfileReady,
    StepEvent,
    Topics,
    decode_as,
)
from sinks import rows
from sinks.rows import RowError, TableRow


@dataclass(frozen=True, slots=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes
    field: str
    problem: str

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            ("steplens-reason", self.problem.encode()),
            ("steplens-field", self.field.encode()),
            ("steplens-source-topic", self.topic.encode()),
            ("steplens-source-partition", str(self.partition).encode()),
            ("steplens-source-offset", str(self.offset).encode()),
        ]


Source = tuple[str, int, int]  # (topic, partition, offset): the insert deduplication token's parts


@dataclass(slots=True)
class Landed:
    rows: list[TableRow] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)  # parallel to `rows`: the message each came from


class LandingProcessor:
    """Decode-and-map for the topics the landing worker consumes."""

    def __init__(self, topics: Topics, max_event_bytes: int) -> None:
        self._max = max_event_bytes
        self._types: dict[str, type[Any]] = {
            topics.steps: StepEvent, topics.jobs: JobEvent, topics.incidents: Incident,
            topics.kernel_summaries: KernelSummary, topics.kernels: KernelBatch, topics.device: DeviceSample,
            topics.profiles: ProfileReady, topics.control: ControlCommand,
        }
        self.counts: dict[str, int] = {}

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic this processor lands."""
        return tuple(self._types)

    def process(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes, now_ns: int, out: Landed
    ) -> None:
        cls = self._types[topic]
        source = (topic, partition, offset)
        try:
            mapped = rows.rows_for(decode_as(cls, raw, self._max), now_ns)
        except (ContractError, RowError) as exc:
            out.dead.append(DeadLetter(topic, partition, offset, key, raw, exc.field, exc.problem))
            out.rows.append(rows.dead_letter(topic, partition, offset, key, raw, exc.problem, exc.field, now_ns))
            out.sources.append(source)
            self.counts["dead"] = self.counts.get("dead", 0) + 1
            return
        out.rows.extend(mapped)
        out.sources.extend([source] * len(mapped))
        self.counts[cls.TYPE] = self.counts.get(cls.TYPE, 0) + 1
