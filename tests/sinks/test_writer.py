"""BatchingWriter against an in-memory backend: batching, retry, backpressure."""

from __future__ import annotations

import pytest

from infra.settings import Settings
from sinks.backend import Backend, SinkError
from sinks.rows import row_for
from sinks.writer import BatchingWriter, SinkBackpressure
from tests.sinks.fakes import FakeBackend
from tests.sinks.samples import incident, step

COLS = ("a", "b")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    backend: FakeBackend, clock: Clock, max_rows: int = 3, max_seconds: float = 1.0, limit: int = 6
) -> BatchingWriter:
    return BatchingWriter(backend, max_rows, max_seconds, limit, clock=clock)


def test_fake_backend_satisfies_the_protocol() -> None:
    assert isinstance(FakeBackend(), Backend)


def test_due_by_size() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    assert not w.due()
    w.add("t", COLS, (1, "x"))
    w.add("t", COLS, (2, "y"))
    assert not w.due()
    w.add("t", COLS, (3, "z"))
    assert w.due()
    assert w.flush() == {"t": 3}
    assert backend.inserts == [("t", COLS, [(1, "x"), (2, "y"), (3, "z")])]
    assert w.buffered == 0 and not w.due()


def test_due_by_age_of_the_oldest_row() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    w.add("t", COLS, (1, "x"))
    clock.now += 0.5
    w.add("u", COLS, (2, "y"))
    assert not w.due()
    clock.now += 0.5
    assert w.due()


def test_flush_writes_one_insert_per_table_and_counts() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    w.add_row(row_for(step(), 1))
    w.add_row(row_for(step(rank=4), 1))
    w.add_row(row_for(incident(), 1))
    assert w.buffered_rows("steps") == 2
    assert w.flush() == {"steps": 2, "incidents": 1}
    assert [t for t, _, _ in backend.inserts] == ["steps", "incidents"]
    w.add_row(row_for(step(step=11), 1))
    w.flush()
    assert w.rows_written == {"steps": 3, "incidents": 1}
    assert w.flush() == {}


def test_failed_flush_keeps_rows_and_later_flush_writes_them() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    w.add("t", COLS, (1, "x"))
    backend.fail = True
    with pytest.raises(SinkError, match="server is down"):
        w.flush()
    assert w.buffered == 1 and w.flush_failures == 1 and w.last_error is not None
    backend.fail = False
    assert w.flush() == {"t": 1}
    assert backend.rows("t") == [(1, "x")]
    assert w.buffered == 0 and w.last_error is None


def test_one_failing_table_does_not_block_the_others() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    w.add("good", COLS, (1, "x"))
    w.add("bad", COLS, (2, "y"))
    backend.fail, backend.fail_tables = True, {"bad"}
    with pytest.raises(SinkError, match="table bad"):
        w.flush()
    assert backend.rows("good") == [(1, "x")]
    assert w.buffered_rows("good") == 0 and w.buffered_rows("bad") == 1
    assert w.rows_written == {"good": 1}


def test_due_waits_max_seconds_after_a_failure() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock)
    for i in range(3):
        w.add("t", COLS, (i, "x"))
    backend.fail = True
    with pytest.raises(SinkError):
        w.flush()
    assert not w.due()  # full, but the backend just failed: do not hammer it
    clock.now += 1.0
    assert w.due()


def test_backpressure_when_the_buffer_is_full_and_nothing_is_dropped() -> None:
    backend, clock = FakeBackend(), Clock()
    w = make(backend, clock, limit=4)
    backend.fail = True
    for i in range(4):
        w.add("t", COLS, (i, "x"))
    with pytest.raises(SinkError):
        w.flush()
    with pytest.raises(SinkBackpressure) as info:
        w.add("t", COLS, (4, "x"))
    err = info.value
    assert (err.buffered, err.limit, err.retry_after) == (4, 4, 1.0)
    assert isinstance(err.last_error, SinkError)
    assert "server is down" in str(err)
    assert w.buffered == 4  # the rejected row was not buffered
    backend.fail = False
    assert w.flush() == {"t": 4}
    w.add("t", COLS, (4, "x"))  # accepted again
    w.flush()
    assert [r[0] for r in backend.rows("t")] == [0, 1, 2, 3, 4]


def test_rows_must_match_their_table_columns() -> None:
    w = make(FakeBackend(), Clock())
    with pytest.raises(ValueError, match="2 columns"):
        w.add("t", COLS, (1,))
    w.add("t", COLS, (1, "x"))
    with pytest.raises(ValueError, match="differ"):
        w.add("t", ("a", "c"), (1, "x"))


def test_invalid_limits() -> None:
    with pytest.raises(ValueError):
        BatchingWriter(FakeBackend(), 0, 1.0, 10)
    with pytest.raises(ValueError):
        BatchingWriter(FakeBackend(), 5, 0.0, 10)
    with pytest.raises(ValueError):
        BatchingWriter(FakeBackend(), 5, 1.0, 4)


def test_from_settings() -> None:
    w = BatchingWriter.from_settings(FakeBackend(), Settings(sink_batch_size=100, sink_batch_seconds=2.5))
    assert (w.max_rows, w.max_seconds, w.max_buffered_rows) == (100, 2.5, 1000)
