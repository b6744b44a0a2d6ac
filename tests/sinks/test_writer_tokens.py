"""Deduplication tokens of the BatchingWriter: one batch per table naming every source range, retried unchanged."""

from __future__ import annotations

import pytest

from sinks.backend import SinkError
from sinks.writer import BatchingWriter
from tests.sinks.fakes import FakeBackend

COLS = ("a",)


def writer(backend: FakeBackend) -> BatchingWriter:
    return BatchingWriter(backend, max_rows=100, max_seconds=1.0, max_buffered_rows=1000, clock=lambda: 0.0)


def test_one_insert_per_table_with_every_partitions_offset_range() -> None:
    backend = FakeBackend()
    w = writer(backend)
    w.add("t", COLS, (1,), ("steps", 1, 40))
    for offset in (5, 6, 9):
        w.add("t", COLS, (offset,), ("steps", 0, offset))
    w.add("t", COLS, (8,), ("device", 0, 3))
    w.add("u", COLS, (2,), ("steps", 0, 7))  # another table from the same message range
    w.add("t", COLS, (3,))  # no source: its own insert, no token
    assert w.flush() == {"t": 6, "u": 1}
    assert sorted(t for t in backend.tokens if t) == ["device:0:3-3;steps:0:5-9;steps:1:40-40", "steps:0:7-7"]
    assert [t for t, _, _ in backend.inserts].count("t") == 2  # the sourced rows, and the one without a source
    assert None in backend.tokens


def test_a_retry_resends_the_same_block_with_the_same_token() -> None:
    backend = FakeBackend()
    w = writer(backend)
    for offset in range(3):
        w.add("t", COLS, (offset,), ("steps", 2, offset))
    backend.fail = True
    with pytest.raises(SinkError):
        w.flush()
    backend.fail = False
    w.flush()
    assert backend.tokens == ["steps:2:0-2", "steps:2:0-2"]
    assert backend.rows("t") == [(0,), (1,), (2,)]


def test_offsets_of_a_partition_must_not_go_back() -> None:
    w = writer(FakeBackend())
    w.add("t", COLS, (1,), ("steps", 0, 10))
    with pytest.raises(ValueError, match="offset 9"):
        w.add("t", COLS, (1,), ("steps", 0, 9))
