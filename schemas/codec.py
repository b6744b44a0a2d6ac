"""orjson wire format: encode any contract event, decode and validate raw bytes.

Every message is one JSON object with `type` (which event) and `v` (contract version)
followed by the event's fields. Optional fields that are null are left out on encode.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from functools import cache
from typing import Any, TypeVar

import orjson

from schemas.action import MitigationAction
from schemas.bounds import max_chars
from schemas.control import ControlCommand
from schemas.decoding import decode_object
from schemas.device import DeviceSample
from schemas.errors import ContractError, clip
from schemas.incident import Incident
from schemas.job import JobEvent
from schemas.kernel import KernelBatch
from schemas.kernel_summary import KernelSummary
from schemas.profile import ProfileReady
from schemas.step import StepEvent
from schemas.version import CONTRACT_VERSION, parse_version

Event = (StepEvent | KernelBatch | KernelSummary | DeviceSample | ProfileReady | Incident | ControlCommand | JobEvent
         | MitigationAction)

EVENT_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (StepEvent, KernelBatch, KernelSummary, DeviceSample, ProfileReady, Incident, ControlCommand, JobEvent,
                MitigationAction)
}

# Larger than this is out of contract: it would strain brokers and workers. Kafka's own
# limit (message.max.bytes) is set above it so the dead-letter path can see such events.
MAX_EVENT_BYTES = 1_048_576


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _plain(obj: Any) -> Any:
    """orjson `default` hook: dataclasses become dicts without their null fields."""
    if is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for name in _field_names(type(obj)):
            value = getattr(obj, name)
            if value is not None:
                out[name] = value
        return out
    raise TypeError(f"cannot encode {type(obj).__name__}")


def encode(event: Event) -> bytes:
    header = {"type": type(event).TYPE, "v": CONTRACT_VERSION}
    body = _plain(event)
    return orjson.dumps({**header, **body}, default=_plain, option=orjson.OPT_PASSTHROUGH_DATACLASS)


AnyEvent = TypeVar("AnyEvent", bound=Event)


def bounded(event: AnyEvent) -> AnyEvent:
    """`event` with every top-level string field clipped to its contract limit (`schemas.bounds`).

    Workers that copy event text into their own events (a host or job id into an incident's
    summary) pass what they publish through here, the one place that caps it, so valid input
    can never make a worker's output out of contract or too large to land.
    """
    changes: dict[str, Any] = {}
    cls: type = type(event)
    for name in _field_names(cls):
        value = getattr(event, name)
        if isinstance(value, str):
            limit = max_chars(name)
            if len(value) > limit:
                changes[name] = clip(value, limit)
    return replace(event, **changes) if changes else event


def decode(raw: object, max_bytes: int = MAX_EVENT_BYTES) -> Event:
    """Parse and validate one message; raise ContractError naming the field and the problem.

    Total: whatever `raw` is (bytes, str, memoryview, None for a Kafka tombstone, any other
    object) the result is an event or a `ContractError`, never another exception, so a
    caller that catches `ContractError` can dead-letter or skip every bad input.
    """
    try:
        return _decode(raw, max_bytes)
    except ContractError:
        raise
    except Exception as exc:  # a bug or a case the checks above missed: still a contract error
        raise ContractError("<payload>", f"cannot be decoded ({type(exc).__name__}: {exc})") from None


def _decode(raw: object, max_bytes: int) -> Event:
    return decode_mapping(parse_payload(raw, max_bytes))


def parse_payload(raw: object, max_bytes: int) -> Any:
    """A record's value parsed as JSON, or the whole-record `ContractError` (null, not bytes,
    over `max_bytes`, not JSON): shared by one-event decoding and packed records."""
    if raw is None:
        raise ContractError("<payload>", "is null (a tombstone or an empty message value)")
    if not isinstance(raw, (bytes, bytearray, memoryview, str)):
        raise ContractError("<payload>", f"must be bytes or str, got {type(raw).__name__}")
    size = raw.nbytes if isinstance(raw, memoryview) else len(raw)
    if size > max_bytes:
        raise ContractError("<payload>", f"is {size} bytes, larger than the {max_bytes}-byte limit")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ContractError("<payload>", f"is not valid JSON: {exc}") from None
    return data


def decode_mapping(data: Any) -> Event:
    if not isinstance(data, dict):
        raise ContractError("<payload>", f"must be a JSON object, got {type(data).__name__}")
    if "type" not in data:
        raise ContractError("type", "is required")
    kind = data["type"]
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        expected = ", ".join(sorted(EVENT_TYPES))
        raise ContractError("type", f"unknown event type {kind!r}, expected one of {expected}")
    if "v" not in data:
        raise ContractError("v", "is required")
    version = parse_version(data["v"])
    event: Event = decode_object(cls, data, strict=not version.is_newer_minor)
    return event


def decode_as(cls: type[Any], raw: object, max_bytes: int = MAX_EVENT_BYTES) -> Any:
    """Decode and insist on one event type (a topic carries exactly one type); total like `decode`."""
    event = decode(raw, max_bytes)
    if not isinstance(event, cls):
        raise ContractError("type", f"this topic carries {cls.TYPE!r} events, got {type(event).TYPE!r}")
    return event
