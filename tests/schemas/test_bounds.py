"""The named bad inputs of issue 10, one by one, and the one source of bounds shared with the sinks."""

from __future__ import annotations

import orjson
import pytest

from schemas import ContractError, Incident, StepEvent, bounded, decode, decode_as, encode
from schemas.bounds import INT_FIELDS, MAX_ID_CHARS, MAX_TEXT_CHARS, UINT16, UINT32
from sinks import rows
from tests.sinks.samples import incident, step

GOOD = orjson.loads(encode(step()))


def raw(**changes: object) -> bytes:
    return orjson.dumps({**GOOD, **changes})


def error(message: object) -> ContractError:
    with pytest.raises(ContractError) as info:
        decode(message)
    return info.value


@pytest.mark.parametrize("message", [None, b"", "", memoryview(b"\xff"), bytearray(b"[]"), 7, 1.5, [], object()])
def test_any_input_type_is_a_contract_error(message: object) -> None:
    assert error(message).field == "<payload>"


def test_a_tombstone_says_so() -> None:
    assert "tombstone" in error(None).problem


@pytest.mark.parametrize("version", ["1.²", "².1", "١.١", "1.1 ", "1", "1.1.1", "9" * 5_000 + ".1", "1." + "9" * 5_000])
def test_versions_are_ascii_and_short(version: str) -> None:
    exc = error(raw(v=version))
    assert exc.field == "v"
    assert len(exc.problem) < 400


def test_a_newer_minor_with_many_digits_is_still_read() -> None:
    assert isinstance(decode(raw(v="1.999999")), StepEvent)


@pytest.mark.parametrize(("field", "value"), [
    ("end_ns", 2**64 - 1), ("start_ns", 2**63), ("step", 2**63), ("rank", 2**32), ("world", 2**32),
    ("device", 2**16), ("gc_count", 2**64), ("tokens", 2**70),
])
def test_integers_outside_their_column_range_are_contract_errors(field: str, value: int) -> None:
    text = orjson.dumps({**GOOD, field: 0}).decode()  # orjson cannot write ints beyond 64 bits
    text = text.replace(f'"{field}":0', f'"{field}":{value}', 1)
    exc = error(text.encode())
    assert exc.field == field


def test_a_pipeline_stage_beyond_the_stage_column_is_a_contract_error() -> None:
    domains = {"pp": {"group": 0, "size": 40_000, "index": 39_999}}
    exc = error(raw(world=40_000, rank=0, domains=domains))
    assert exc.field == "domains.pp.index"


def test_hosts_must_be_present_and_short() -> None:
    assert error(raw(host="")).field == "host"
    assert error(raw(host="h" * (MAX_ID_CHARS + 1))).field == "host"
    assert error(raw(job="j" * 600_000)).field == "job"
    assert isinstance(decode(raw(host="h" * MAX_ID_CHARS)), StepEvent)


def test_free_text_has_a_larger_limit() -> None:
    good = orjson.loads(encode(incident()))
    assert isinstance(decode(orjson.dumps({**good, "summary": "s" * MAX_TEXT_CHARS})), Incident)
    assert error(orjson.dumps({**good, "summary": "s" * (MAX_TEXT_CHARS + 1)})).field == "summary"


def test_deep_nesting_huge_and_non_utf8_messages_are_contract_errors() -> None:
    assert error(b"[" * 5_000 + b"]" * 5_000).field == "<payload>"
    assert error(raw(phases=[[[[[[1]]]]]])).field == "phases"
    assert error(raw(host="h" * 2_100_000)).field == "<payload>"  # over the 1 MiB limit
    assert error(raw()[:20] + b"\xff\xfe" + raw()[20:]).field == "<payload>"
    assert error(b'{"type":"step","v":"1.1","job":"\\ud800"}').field == "<payload>"


def test_one_error_names_the_field_and_never_quotes_the_whole_input() -> None:
    exc = error(raw(type="x" * 100_000))
    assert exc.field == "type" and len(str(exc)) < 1_000


def test_every_decoded_integer_fits_its_column() -> None:
    """The bounds decode enforces are the ones rows fit: the extreme accepted values land."""
    top = step(rank=UINT32[1] - 1, world=UINT32[1], device=UINT16[1], step=2**63 - 1,
               start_ns=2**63 - 2, end_ns=2**63 - 1)
    decoded = decode_as(StepEvent, encode(top))
    assert rows.row_for(decoded, 1).table == "steps"
    assert INT_FIELDS["device"] == rows._UINT16  # the same objects, not copies that can drift


def test_bounded_caps_the_text_a_worker_copies_into_its_own_events() -> None:
    host = "h" * 600_000
    made = Incident(incident_id="i-1", job="j", rule="SLOW_RANK", state="open", severity="warning",
                    scope="rank", summary=f"rank 3 on {host} is slow", detected_ns=1, host=host)
    capped = bounded(made)
    assert isinstance(capped, Incident)
    assert len(capped.summary) == MAX_TEXT_CHARS and capped.host is not None and len(capped.host) == MAX_ID_CHARS
    assert len(encode(capped)) < 10_000
    assert isinstance(decode(encode(capped)), Incident)  # still in contract, so it lands
    assert bounded(incident()) == incident()
