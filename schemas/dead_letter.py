"""A dead letter on the wire: the message as received, and headers saying why and where it came from.

Every stage that refuses a message sends it to the dead-letter topic in this one form (the land worker
for events, the parse worker for profile notices), so an operator's tooling reads one set of headers:
`steplens-reason`, `steplens-field`, `steplens-source-topic`, `-partition`, `-offset`, and
`steplens-tombstone` / `steplens-truncated` where they apply.
"""

from __future__ import annotations

from dataclasses import dataclass

# The dead-letter topic takes messages up to the producer's 4 MiB request limit, while an input
# topic may hold one just as large: above this size the topic copy is cut (header
# `steplens-truncated` gives the full size) so sending it can never fail and stall the stage.
# The dead_letters table always keeps the whole payload.
DEADLETTER_TOPIC_MAX_BYTES = 3 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message a stage refused. `raw` is the value as received (b"" for a tombstone)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    raw: bytes
    field: str
    problem: str
    tombstone: bool = False

    def headers(self) -> list[tuple[str, bytes]]:
        out = [
            ("steplens-reason", self.problem.encode("utf-8", "backslashreplace")),
            ("steplens-field", self.field.encode("utf-8", "backslashreplace")),
            ("steplens-source-topic", self.topic.encode("utf-8", "backslashreplace")),
            ("steplens-source-partition", str(self.partition).encode()),
            ("steplens-source-offset", str(self.offset).encode()),
        ]
        if self.tombstone:
            out.append(("steplens-tombstone", b"1"))
        if len(self.raw) > DEADLETTER_TOPIC_MAX_BYTES:
            out.append(("steplens-truncated", str(len(self.raw)).encode()))
        return out

    def topic_value(self) -> bytes:
        """The value for the dead-letter topic: the raw bytes, cut above DEADLETTER_TOPIC_MAX_BYTES."""
        return self.raw[:DEADLETTER_TOPIC_MAX_BYTES]
