"""Property test: the contract decoder is total on malformed input (issue 10's acceptance fuzz).

Over 10,000 generated messages (derandomised, so CI sees the same ones every run) go through
`schemas.decode` and `schemas.decode_as`. Every one must give an event or a `ContractError`
and nothing else; an event it accepts must also fit its ClickHouse row (`sinks.rows`), so
detect (which decodes) and land (which also maps to rows) agree on what is valid.

The generator mutates valid events of every type (the docs/events.md examples) and adds raw
garbage; each required kind of bad input is drawn often, and counted to prove it was.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import EVENT_TYPES, ContractError, Event, StepEvent, decode, decode_as
from sinks import rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
EXAMPLES: list[dict[str, Any]] = [
    orjson.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
]
STORED = rows.STORED_TYPES
EXAMPLES_TO_RUN = 10_400
BATCH = 20

# Large inputs are built once (drawing 2 MB per example would make the test slow, not better).
TWO_MB_JSON = json.dumps({**EXAMPLES[0], "host": "h" * 2_097_152}).encode()
TWO_MB_GARBAGE = b"\xff\xfe" * 1_048_576
DEEP = [b"[" * n + b"]" * n for n in (100, 1_023, 1_025, 5_000)] + [
    b'{"a":' * 2_000 + b"1" + b"}" * 2_000,
]
HUGE_DIGITS = "9" * 5_000
NON_ASCII_DIGITS = "²³¹٠١٢३४५੬௭๘໙༡၂႓፩៣ᠤᥦ᧑᪁᭒᮳᱀꘠꣐꤁꧐꩐꯰０１２"

json_leaf = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=2**31 - 5, max_value=2**64 + 5), st.integers(max_value=-(2**63) + 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40), st.text(alphabet=NON_ASCII_DIGITS + ".", max_size=8),
    st.sampled_from(["", " ", "1.1", "1.²", "٣.1", HUGE_DIGITS, "1." + HUGE_DIGITS, "x" * 5_000, "\x00", "\u2028"]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
versions = st.one_of(
    st.text(alphabet=NON_ASCII_DIGITS + "0123456789.", max_size=10),
    st.sampled_from(["1.²", "².1", "1.1" + HUGE_DIGITS, HUGE_DIGITS + ".1", "1." + HUGE_DIGITS, "1.1\n", " 1.1"]),
    st.from_regex(r"[0-9]{1,12}\.[0-9]{1,12}", fullmatch=True),
    json_value,
)
out_of_range = st.one_of(
    st.sampled_from([2**64 - 1, 2**63, 2**32, 2**31, 2**16, -1, -(2**63) - 1, 2**200, 1e30, -1e300, 1.5]),
    st.integers(min_value=2**63, max_value=2**70),
)


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, object]:
    """(kind, raw message): mutated valid events and raw garbage, the kinds issue 10 names."""
    kind = draw(st.sampled_from([
        "null", "version", "field_value", "out_of_range", "drop_field", "extra_field", "deep_nesting",
        "two_mb", "non_utf8", "raw_bytes", "raw_text", "json_value", "not_bytes", "type",
    ]))
    base = dict(draw(st.sampled_from(EXAMPLES)))
    fields = sorted(base)
    raw: object
    if kind == "null":
        raw = None
    elif kind == "version":
        base["v"] = draw(versions)
        raw = _dumps(base)
    elif kind == "field_value":
        base[draw(st.sampled_from(fields))] = draw(json_value)
        raw = _dumps(base)
    elif kind == "out_of_range":
        base[draw(st.sampled_from(fields))] = draw(out_of_range)
        raw = _dumps(base)
    elif kind == "drop_field":
        base.pop(draw(st.sampled_from(fields)))
        raw = _dumps(base)
    elif kind == "extra_field":
        base[draw(st.text(max_size=12))] = draw(json_value)
        raw = _dumps(base)
    elif kind == "deep_nesting":
        if draw(st.booleans()):
            raw = draw(st.sampled_from(DEEP))
        else:
            base[draw(st.sampled_from(fields))] = _deep(draw(st.integers(min_value=10, max_value=200)))
            raw = _dumps(base)
    elif kind == "two_mb":
        raw = draw(st.sampled_from([TWO_MB_JSON, TWO_MB_GARBAGE, TWO_MB_JSON.decode()]))
    elif kind == "non_utf8":
        good = _dumps(base)
        at = draw(st.integers(min_value=0, max_value=len(good)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]))
        raw = good[:at] + bad + good[at:]
    elif kind == "raw_bytes":
        raw = draw(st.binary(max_size=200))
    elif kind == "raw_text":
        raw = draw(st.text(max_size=200))
    elif kind == "json_value":
        raw = _dumps(draw(json_value))
    elif kind == "not_bytes":
        raw = draw(st.one_of(st.integers(), st.floats(), st.lists(st.integers(), max_size=3),
                             st.just(memoryview(_dumps(base))), st.just(bytearray(_dumps(base))),
                             st.just(object())))
    else:  # type
        base["type"] = draw(st.one_of(st.sampled_from(sorted(EVENT_TYPES)), json_value))
        raw = _dumps(base)
    return kind, raw


def _dumps(obj: Any) -> bytes:
    """JSON like a producer would write it; unlike orjson.dumps it also writes ints beyond 64 bits."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _check(raw: object) -> Event | None:
    """decode and decode_as: an event or a ContractError with a short reason, nothing else."""
    try:
        event = decode(raw)
    except ContractError as exc:
        assert exc.field and exc.problem  # a reason an operator can act on
        assert len(str(exc)) < 1_000  # never the whole hostile input
        try:
            decode_as(StepEvent, raw)
        except ContractError:
            return None
        raise AssertionError("decode_as accepted what decode refused") from None
    if isinstance(event, STORED):
        rows.row_for(event, 1)  # what decodes, lands: no RowError for a decoded event
    assert decode_as(type(event), raw) == event
    return event


def test_every_malformed_message_is_an_event_or_a_contract_error() -> None:
    seen: Counter[str] = Counter()
    decoded: Counter[str] = Counter()

    # messages are drawn in batches: hypothesis' cost is per example, the decoder's per message
    @settings(max_examples=EXAMPLES_TO_RUN // BATCH, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(malformed(), min_size=BATCH, max_size=BATCH))
    def run(cases: list[tuple[str, object]]) -> None:
        for kind, raw in cases:
            seen[kind] += 1
            if _check(raw) is not None:
                decoded[kind] += 1

    run()
    assert sum(seen.values()) >= 10_000
    # every required kind was drawn, each many times
    for kind in ("null", "two_mb", "version", "out_of_range", "deep_nesting", "non_utf8", "field_value", "raw_bytes"):
        assert seen[kind] >= 100, (kind, seen)
    # the required kinds are always rejected; other mutations may still be valid events
    for kind in ("null", "two_mb", "non_utf8"):
        assert decoded[kind] == 0, (kind, decoded)
