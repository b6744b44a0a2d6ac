"""Reading records back as events, packed (contract 1.2: a JSON array of events) or not."""

from __future__ import annotations

import orjson

from schemas import Event, StepEvent, decode


def events_of(value: bytes) -> list[Event]:
    """The events a record carries, in order; every element validated as a complete event."""
    doc = orjson.loads(value)
    if isinstance(doc, list):
        assert doc, "an empty array is never sent"
        return [decode(orjson.dumps(element)) for element in doc]
    return [decode(value)]


def is_packed(value: bytes) -> bool:
    return value[:1] == b"["


def steps_of(value: bytes) -> list[StepEvent]:
    """events_of for the steps topic: every element must be a StepEvent."""
    out = events_of(value)
    assert all(isinstance(e, StepEvent) for e in out), out
    return [e for e in out if isinstance(e, StepEvent)]
