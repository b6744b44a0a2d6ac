import base64

import orjson
import pytest

from schemas import JobEvent, Topics, encode
from schemas.dead_letter import DEADLETTER_TOPIC_MAX_BYTES
from sinks import rows
from sinks.rows import RowError
from streams.detect.ingest.decode import decode_batch
from streams.land.processor import Landed, LandingProcessor
from tests.streams.helpers import nan_spelled, step_event

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
    assert set(processor.topics) == {*TOPICS.inputs(), TOPICS.incidents, TOPICS.control, TOPICS.actions}


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


def _packed(*raws: bytes) -> bytes:
    return b"[" + b",".join(raws) + b"]"


@pytest.mark.parametrize("fast", [True, False])
def test_a_packed_record_lands_every_element_and_dead_letters_exactly_the_bad_one(fast: bool) -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=100_000, fast=fast)
    good = [encode(step_event(r, 3, 400.0)) for r in range(4)]
    bad = encode(step_event(5, 3, 400.0)).replace(b'"rank":5', b'"rank":99')
    out = Landed()
    processor.process(TOPICS.steps, 2, 41, b"job-a/node-0", _packed(good[0], good[1], bad, good[2], good[3]), 9, out)
    steps = [r for r in out.rows if r.table == "steps"]
    assert sorted(r.row[r.columns.index("rank")] for r in steps) == [0, 1, 2, 3]
    assert len(out.dead) == 1
    letter = out.dead[0]
    assert letter.problem.startswith("[2] ") and "world=8" in letter.problem and letter.field == "rank"
    assert (letter.topic, letter.partition, letter.offset) == (TOPICS.steps, 2, 41)
    assert orjson.loads(letter.raw) == orjson.loads(bad)  # the element itself, not the whole record
    assert out.sources == [(TOPICS.steps, 2, 41)] * len(out.rows)
    assert processor.counts == {"step": 4, "dead": 1}


@pytest.mark.parametrize("raw", [b"[]", b"42", b'"x"', b"[{},", b"[" + b",".join([b"{}"] * 4097) + b"]"])
def test_a_record_neither_object_nor_valid_array_is_one_dead_letter_whole(raw: bytes) -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=100_000)
    out = Landed()
    processor.process(TOPICS.device, 0, 3, b"node-0", raw, 9, out)
    assert len(out.dead) == 1 and out.dead[0].raw == raw and out.dead[0].field == "<payload>"
    assert not out.dead[0].problem.startswith("[") and [r.table for r in out.rows] == ["dead_letters"]


def test_arrays_on_one_object_topics_are_dead_lettered_whole() -> None:
    processor = LandingProcessor(TOPICS, max_event_bytes=100_000)
    out = Landed()
    job = encode(JobEvent(job="j", phase="start", world=8, ts_ns=1))
    processor.process(TOPICS.jobs, 0, 0, b"j", _packed(job, job), 9, out)
    assert len(out.dead) == 1 and "one JSON object per record" in out.dead[0].problem


def test_packed_and_unpacked_records_give_identical_rows() -> None:
    raws = [encode(step_event(r, s, 400.0 + r)) for s in range(3) for r in range(8)]
    plain, packed = Landed(), Landed()
    one = LandingProcessor(TOPICS, max_event_bytes=100_000)
    for offset, raw in enumerate(raws):
        one.process(TOPICS.steps, 0, offset, b"k", raw, 9, plain)
    many = LandingProcessor(TOPICS, max_event_bytes=100_000)
    many.process(TOPICS.steps, 0, 0, b"k", _packed(*raws), 9, packed)
    assert packed.rows == plain.rows and many.counts == one.counts == {"step": 24}


def test_detect_decode_reads_arrays_into_the_same_columns_and_skips_only_bad_elements() -> None:
    raws = [encode(step_event(r, 4, 400.0 + r)) for r in range(8)]
    bad = raws[3].replace(b'"rank":3', b'"rank":99')
    plain, plain_stats = decode_batch(raws, 100_000)
    packed, stats = decode_batch([_packed(*raws[:4]), _packed(*raws[4:], bad), b"[]", b"7"], 100_000)
    assert nan_spelled(packed) == nan_spelled(plain) and plain_stats.events == 8
    assert (stats.events, stats.bad, stats.by_type) == (11, 3, {"step": 8})
    job = encode(JobEvent(job="job-a", phase="start", world=8, ts_ns=1))
    chunks, stats = decode_batch([_packed(job)], 100_000)  # jobs are one object per record, as landing insists
    assert chunks == [] and stats.bad == 1
    assert decode_batch([job], 100_000)[1].by_type == {"job": 1}
