"""Spool: FIFO order, byte bound, segment rolling, cursor persistence, torn tails, one writer per directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from producers.exporter import OutRecord
from producers.spool import CURSOR_FILE, SEGMENT_SUFFIX, Spool, encode_record, iter_frames, open_spool


def recs(n: int, start: int = 0, size: int = 100) -> list[OutRecord]:
    return [
        OutRecord("t.steps", None if i % 3 == 0 else f"job/{i}".encode(), f"{i:08d}".encode() + b"x" * size)
        for i in range(start, start + n)
    ]


def segments(d: Path) -> list[Path]:
    return sorted(d.glob(f"*{SEGMENT_SUFFIX}"))


def test_frames_round_trip_including_missing_key() -> None:
    rs = recs(5)
    buf = b"".join(encode_record(r) for r in rs)
    assert [r for r, _ in iter_frames(buf)] == rs


def test_fifo_across_segments_and_deleted_when_drained(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000_000, segment_bytes=1000)
    written = recs(50)
    for i in range(0, 50, 7):
        assert spool.append(written[i:i + 7]) == len(written[i:i + 7])
    assert spool.pending == 50 and len(segments(tmp_path)) > 3
    out: list[OutRecord] = []
    while not spool.empty:
        batch = spool.peek(6)
        out.extend(batch)
        spool.consume(len(batch))
    assert out == written
    assert segments(tmp_path) == [] and not (tmp_path / CURSOR_FILE).exists() and spool.bytes == 0


def test_bound_stores_a_prefix(tmp_path: Path) -> None:
    one = len(encode_record(recs(1)[0]))
    spool = Spool(tmp_path, max_bytes=one * 10 + one // 2)
    assert spool.append(recs(8)) == 8
    assert spool.append(recs(8, start=8)) == 2
    assert spool.append(recs(1, start=16)) == 0
    assert spool.pending == 10 and spool.bytes <= spool.max_bytes
    assert spool.peek(100) == recs(10)


def test_unconsumed_peek_is_not_lost(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1_000_000)
    spool.append(recs(10))
    assert spool.peek(4) == recs(4)  # export failed: nothing consumed
    assert spool.peek(4) == recs(4)
    spool.consume(3)
    assert spool.peek(100) == recs(7, start=3)


def test_reopen_resumes_at_the_cursor(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1_000_000, segment_bytes=600)
    spool.append(recs(20))
    spool.peek(9)
    spool.consume(9)
    again = Spool(tmp_path, max_bytes=1_000_000, segment_bytes=600)
    assert again.pending == 11
    assert again.peek(100) == recs(11, start=9)


def test_torn_tail_is_skipped_and_new_records_go_to_a_new_segment(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1_000_000)
    spool.append(recs(5))
    (seg,) = segments(tmp_path)
    with open(seg, "ab") as fh:
        fh.write(encode_record(recs(1, start=5)[0])[:-10])  # a crash mid-write
    again = Spool(tmp_path, max_bytes=1_000_000)
    assert again.pending == 5 and again.corrupt_tails == 1
    again.append(recs(3, start=100))
    assert len(segments(tmp_path)) == 2
    out: list[OutRecord] = []
    while not again.empty:
        batch = again.peek(4)
        out.extend(batch)
        again.consume(len(batch))
    assert out == recs(5) + recs(3, start=100)
    assert segments(tmp_path) == []


def test_open_spool_gives_each_directory_one_writer(tmp_path: Path) -> None:
    """An explicit directory already held is refused (no spool, no lock); under a root the next process
    gets `<name>-<pid>`; giving both is a caller's error."""
    first, lock = open_spool("trainer", None, tmp_path, 1_000_000)
    assert first is not None and lock is not None and first.directory == tmp_path / "trainer"
    try:
        assert open_spool("x", tmp_path / "trainer", None, 1_000_000) == (None, None)
        second, lock2 = open_spool("trainer", None, tmp_path, 1_000_000)
        assert second is not None and lock2 is not None
        assert second.directory == tmp_path / f"trainer-{os.getpid()}"
        os.close(lock2)
    finally:
        os.close(lock)
    with pytest.raises(ValueError, match="not both"):
        open_spool("trainer", tmp_path / "a", tmp_path, 1_000_000)
