"""Packing a round's records per (topic, key) into JSON arrays: order, bounds, what stays single."""

from __future__ import annotations

import orjson

from producers.exporter import OutRecord
from producers.packing import pack_records
from schemas import encode
from tests.producers._factories import step_events
from tests.producers._records import steps_of

PACKABLE = frozenset({"t.steps", "t.device"})


def rec(topic: str, key: bytes | None, n: int) -> OutRecord:
    return OutRecord(topic, key, orjson.dumps({"n": n}))


def test_groups_per_topic_and_key_keep_emission_order_and_members() -> None:
    records = [rec("t.steps", b"a", 0), rec("t.steps", b"b", 1), rec("t.jobs", b"a", 2),
               rec("t.steps", b"a", 3), rec("t.device", b"a", 4), rec("t.steps", b"b", 5), rec("t.jobs", b"a", 6)]
    packed = pack_records(records, PACKABLE)
    assert [(p.record.topic, p.record.key) for p in packed] == [
        ("t.steps", b"a"), ("t.steps", b"b"), ("t.jobs", b"a"), ("t.device", b"a"), ("t.jobs", b"a")]
    assert [[orjson.loads(m.value)["n"] for m in p.members] for p in packed] == [[0, 3], [1, 5], [2], [4], [6]]
    for p in packed:
        body = orjson.loads(p.record.value)
        if len(p.members) > 1:
            assert body == [orjson.loads(m.value) for m in p.members]
        else:  # one event alone stays an object, and a non-packable topic is never an array
            assert p.record is p.members[0] and isinstance(body, dict)
    assert sum(len(p.members) for p in packed) == len(records)


def test_bounds_on_events_and_bytes_split_in_order() -> None:
    records = [rec("t.steps", b"k", i) for i in range(10)]
    by_count = pack_records(records, PACKABLE, max_events=4)
    assert [len(p.members) for p in by_count] == [4, 4, 2]
    size = len(records[0].value)
    by_bytes = pack_records(records, PACKABLE, max_bytes=1 + 3 * (size + 1))
    assert [len(p.members) for p in by_bytes] == [3, 3, 3, 1]
    for packed in (by_count, by_bytes):
        assert [m for p in packed for m in p.members] == records
        assert all(len(p.record.value) <= 1 + 3 * (size + 1) for p in by_bytes)


def test_an_event_above_the_byte_bound_goes_alone() -> None:
    big = OutRecord("t.steps", b"k", orjson.dumps({"pad": "x" * 100}))
    records = [rec("t.steps", b"k", 0), big, rec("t.steps", b"k", 1)]
    packed = pack_records(records, PACKABLE, max_bytes=50)
    assert [p.members for p in packed] == [(records[0],), (big,), (records[2],)]
    assert packed[1].record is big


def test_packed_step_events_validate_element_by_element() -> None:
    events = step_events(24, world=4)
    records = [OutRecord("t.steps", f"job-t/{e.rank}".encode(), encode(e)) for e in events]
    packed = pack_records(records, PACKABLE)
    assert len(packed) == 4
    got = [ev for p in packed for ev in steps_of(p.record.value)]
    assert sorted(got, key=lambda e: (e.step, e.rank)) == events
