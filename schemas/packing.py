"""Contract 1.2 packed records: one Kafka record carries one event (an object) or an array of events.

Why: per-record work (kafka-python's pure-Python record append and parse, the broker, each
consumer poll) dominated every stage's CPU; an array of a host's (or a rank's) events of one
topic amortises it over many events. Only the raw telemetry topics may be packed
(`PACKED_TOPIC_TYPES`); `jobs`, `incidents`, `control`, `profiles` stay one object per record.

Whole-record problems (not JSON, neither object nor array, an empty or oversized array) are
one `ContractError`; an element that fails validation is an error of that element only, its
reason prefixed with the element's index (``[17] …``), so its siblings still land.
"""

from __future__ import annotations

from typing import Any

from schemas.codec import MAX_EVENT_BYTES, decode_mapping, parse_payload
from schemas.errors import ContractError

# At most this many events in one record (each record also stays under the broker's 1 MB limit).
MAX_PACKED_EVENTS = 4_096

# Event types whose topics may carry packed records (steps, kernel-summaries, device, kernels).
PACKED_TOPIC_TYPES = frozenset(("step", "kernel_summary", "device", "kernels"))


def split_record(raw: object, max_bytes: int = MAX_EVENT_BYTES) -> tuple[list[Any], bool]:
    """(the record's parsed elements, packed?); `ContractError` for a whole-record problem.

    An object is a one-element list (packed False); elements are returned as parsed, unvalidated.
    """
    return check_elements(parse_payload(raw, max_bytes))


def check_elements(data: Any) -> tuple[list[Any], bool]:
    """`data` (parsed JSON) as a list of elements, or the whole-record `ContractError`."""
    if type(data) is dict:
        return [data], False
    if type(data) is not list:
        raise ContractError("<payload>", f"must be a JSON object or an array of objects, got {type(data).__name__}")
    if not 0 < len(data) <= MAX_PACKED_EVENTS:
        raise ContractError("<payload>", f"a packed record holds 1..{MAX_PACKED_EVENTS} events, got {len(data)}")
    return data, True


def element_error(index: int, exc: ContractError) -> ContractError:
    """`exc` of element `index`, its reason prefixed with the index."""
    return ContractError(exc.field, f"[{index}] {exc.problem}")


def decode_record_as(cls: type[Any], raw: object, max_bytes: int = MAX_EVENT_BYTES) -> list[Any]:
    """Every event of one record of a topic carrying `cls`: per element the event or its `ContractError`.

    Total like `schemas.decode`: a whole-record problem raises `ContractError`; nothing else escapes.
    An array on a topic whose type may not be packed is a whole-record error.
    """
    elements, packed = split_record(raw, max_bytes)
    if packed and cls.TYPE not in PACKED_TOPIC_TYPES:
        raise ContractError("<payload>", f"{cls.TYPE!r} events are one JSON object per record, got an array")
    out: list[Any] = []
    for index, data in enumerate(elements):
        try:
            event = decode_mapping(data)
            if not isinstance(event, cls):
                raise ContractError("type", f"this topic carries {cls.TYPE!r} events, got {type(event).TYPE!r}")
            out.append(event)
        except ContractError as exc:
            out.append(element_error(index, exc) if packed else exc)
        except Exception as exc:  # a bug or an unforeseen case: still this element's contract error
            err = ContractError("<payload>", f"cannot be decoded ({type(exc).__name__}: {exc})")
            out.append(element_error(index, err) if packed else err)
    return out
