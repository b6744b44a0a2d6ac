import base64

import pytest

from schemas import Topics, encode
from sinks import rows
from sinks.rows import RowError
from streams.landing import DEADLETTER_TOPIC_MAX_BYTES, Landed, LandingProcessor
from tests.streams.helpers import step_event

TOPICS = Topics("p.")


def test_good_step_becomes_a_steps_row() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    processor.process(TOPICS.steps, 0, 7, b"job-a/1", encode(step_event(1, 3, 400.0)), 123, out)
    assert out.dead == [] and [r.table for r in out.rows] == ["steps"]


def test_bad_events_become_dead_letters_with_reason_and_exact_bytes() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=2_000)
    out = Landed()
    bad = {
        b"not json": "is not valid JSON",
        encode(step_event(1, 3, 400.0)).replace(b'"rank":1', b'"rank":99'): "must be in [0, world=8)",
        b'{"type":"step","v":"9.0"}': "unsupported major version 9",
        b"{" + b" " * 3000 + b"}": "larger than the 2000-byte limit",
        encode(step_event(1, 3, 400.0)).replace(b'"step":3', b'"step":-3'): "must be >= 0",
    }
    for offset, raw in enumerate(bad):
        processor.process(TOPICS.steps, 1, offset, b"k", raw, 5, out)
    assert len(out.dead) == len(bad)
    for letter, (raw, reason) in zip(out.dead, bad.items(), strict=True):
        assert reason in letter.problem
        assert letter.raw == raw
        headers = dict(letter.headers())
        assert headers["steplens-source-topic"] == TOPICS.steps.encode()
    rows = [r for r in out.rows if r.table == "dead_letters"]
    assert len(rows) == len(bad)
    payloads = {base64.b64decode(r.row[r.columns.index("payload_b64")]) for r in rows}
    assert payloads == set(bad)
    assert processor.counts == {"dead": len(bad)}


def test_wrong_event_type_for_topic_is_a_dead_letter() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    processor.process(TOPICS.jobs, 0, 0, None, encode(step_event(1, 3, 400.0)), 5, out)
    assert out.dead and "carries 'job' events" in out.dead[0].problem


GARBAGE: list[object] = [
    None,  # a tombstone
    b"",
    b"\xff\xfe\x00",
    b"[" * 3000 + b"]" * 3000,
    b'{"type":"step","v":"1.\xc2\xb2"}',
    b'{"type":"step","v":"' + b"9" * 5000 + b'.1"}',
    encode(step_event(1, 3, 400.0)).replace(b'"end_ns":', b'"end_ns":18446744073709551615,"x":'),
    encode(step_event(1, 3, 400.0)).replace(b'"host":"node-0"', b'"host":""'),
    b"null",
    b"[]",
    "text, not bytes",
    memoryview(b"{}"),
    12345,
]


def test_garbage_of_every_kind_interleaved_with_valid_events_is_rows_or_dead_letters() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    sent = 0
    valid = 0
    for topic in processor.topics:
        for offset, bad in enumerate(GARBAGE):
            processor.process(topic, 0, 2 * offset, None if offset % 2 else b"k", bad, 5, out)
            good = encode(step_event(offset % 8, offset, 400.0))
            processor.process(topic, 0, 2 * offset + 1, b"k", good, 5, out)
            sent += 2
            valid += topic == TOPICS.steps
    dead_rows = [r for r in out.rows if r.table == "dead_letters"]
    step_rows = [r for r in out.rows if r.table == "steps"]
    assert len(step_rows) == valid  # valid steps land on the steps topic, and only there
    assert len(out.dead) == len(dead_rows) == sent - valid
    assert len(out.rows) == sent  # one row per input: its table's or a dead letter's
    assert sum(processor.counts.values()) == sent
    assert processor.counts["step"] == valid
    tombstones = [d for d in out.dead if d.tombstone]
    assert len(tombstones) == len(processor.topics)
    assert all(d.raw == b"" and "tombstone" in d.problem for d in tombstones)
    assert all(("steplens-tombstone", b"1") in d.headers() for d in tombstones)


def test_every_input_topic_is_landed_or_dead_lettered() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    assert set(processor.topics) == {*TOPICS.inputs(), TOPICS.incidents, TOPICS.control}


def test_an_unexpected_exception_is_a_dead_letter_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(event: object, ingested_ns: int) -> object:
        raise KeyError("a bug in a row mapping")

    monkeypatch.setattr(rows, "row_for", broken)
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000, fast=False)
    out = Landed()
    processor.process(TOPICS.steps, 2, 9, b"k", encode(step_event(1, 3, 400.0)), 5, out)
    assert [d.field for d in out.dead] == ["<processing>"]
    assert "KeyError" in out.dead[0].problem and "a bug in a row mapping" in out.dead[0].problem
    assert [r.table for r in out.rows] == ["dead_letters"]


def test_a_type_without_a_table_is_dead_lettered_with_a_clear_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def unmapped(event: object, ingested_ns: int) -> object:
        raise RowError("type", "'step' events have no ClickHouse table yet")

    monkeypatch.setattr(rows, "row_for", unmapped)
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000, fast=False)
    out = Landed()
    processor.process(TOPICS.steps, 0, 1, b"k", encode(step_event(1, 3, 400.0)), 5, out)
    assert out.dead[0].field == "type" and "no ClickHouse table" in out.dead[0].problem


def test_an_unknown_topic_is_a_dead_letter() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    processor.process("elsewhere", 0, 1, None, encode(step_event(1, 3, 400.0)), 5, out)
    assert out.dead[0].field == "<topic>"


def test_a_huge_dead_letter_is_cut_for_the_topic_but_kept_whole_in_the_table() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=10_000)
    out = Landed()
    raw = b"x" * (DEADLETTER_TOPIC_MAX_BYTES + 10)
    processor.process(TOPICS.steps, 0, 1, None, raw, 5, out)
    (letter,) = out.dead
    assert letter.topic_value() == raw[:DEADLETTER_TOPIC_MAX_BYTES]
    assert ("steplens-truncated", str(len(raw)).encode()) in letter.headers()
    (row,) = out.rows
    assert base64.b64decode(row.row[row.columns.index("payload_b64")]) == raw
