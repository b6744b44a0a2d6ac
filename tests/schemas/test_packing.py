"""Contract 1.2 packed records: an object or an array of 1..MAX_PACKED_EVENTS events per record."""

from __future__ import annotations

import orjson
import pytest

from schemas import (
    MAX_PACKED_EVENTS,
    ContractError,
    DeviceSample,
    JobEvent,
    StepEvent,
    decode_record_as,
    encode,
    split_record,
)
from schemas.version import CONTRACT_VERSION
from tests.streams.helpers import step_event


def packed(*raws: bytes) -> bytes:
    return b"[" + b",".join(raws) + b"]"


def test_packing_is_in_the_contract_and_an_object_is_one_unpacked_element() -> None:
    assert tuple(map(int, CONTRACT_VERSION.split("."))) >= (1, 2)  # packed records arrived with 1.2
    raw = encode(step_event(1, 3, 400.0))
    elements, is_packed = split_record(raw)
    assert not is_packed and elements == [orjson.loads(raw)]
    assert decode_record_as(StepEvent, raw) == [step_event(1, 3, 400.0)]


def test_an_array_decodes_element_by_element_and_an_older_minor_element_is_valid() -> None:
    events = [step_event(r, 3, 400.0) for r in range(4)]
    old = encode(events[3]).replace(f'"v":"{CONTRACT_VERSION}"'.encode(), b'"v":"1.0"')
    raw = packed(*(encode(e) for e in events[:3]), old)
    assert decode_record_as(StepEvent, raw) == events


def test_a_bad_element_is_its_own_error_with_its_index_and_its_siblings_decode() -> None:
    good = [encode(step_event(r, 3, 400.0)) for r in range(3)]
    bad = encode(step_event(1, 3, 400.0)).replace(b'"rank":1', b'"rank":99')
    out = decode_record_as(StepEvent, packed(good[0], good[1], bad, good[2], b'{"type":"device"}', b"7"))
    assert [type(x) for x in out[:2]] == [StepEvent, StepEvent] and isinstance(out[3], StepEvent)
    errors = {i: x for i, x in enumerate(out) if isinstance(x, ContractError)}
    assert set(errors) == {2, 4, 5}
    assert errors[2].problem.startswith("[2] ") and "world=8" in errors[2].problem and errors[2].field == "rank"
    assert errors[4].problem.startswith("[4] ")  # a device sample on the steps topic (or an incomplete one)
    assert errors[5].problem.startswith("[5] ") and "JSON object" in errors[5].problem


@pytest.mark.parametrize(("raw", "reason"), [
    (b"[]", "1..4096 events, got 0"),
    (b"[" + b",".join([b"{}"] * (MAX_PACKED_EVENTS + 1)) + b"]", f"got {MAX_PACKED_EVENTS + 1}"),
    (b"42", "object or an array"),
    (b'"step"', "object or an array"),
    (b"null", "object or an array"),
    (b"[1,", "not valid JSON"),
    (None, "is null"),
])
def test_whole_record_problems_are_one_error(raw: bytes | None, reason: str) -> None:
    with pytest.raises(ContractError) as info:
        decode_record_as(DeviceSample, raw, max_bytes=1 << 20)
    assert info.value.field == "<payload>" and reason in info.value.problem


def test_one_object_topics_refuse_arrays_whole() -> None:
    job = encode(JobEvent(job="j", phase="start", world=8, ts_ns=1))
    assert decode_record_as(JobEvent, job)[0] == JobEvent(job="j", phase="start", world=8, ts_ns=1)
    with pytest.raises(ContractError, match="one JSON object per record"):
        decode_record_as(JobEvent, packed(job, job))
