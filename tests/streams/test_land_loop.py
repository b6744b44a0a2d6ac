"""The landing loop's ack discipline and the lander's retry, with in-memory stand-ins (pure unit tests)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sinks.rows import row_for
from sinks.writer import BatchingWriter
from steplens.config import load_settings
from streams.land_app import CRASH_EXIT_CODE, run_batches
from streams.lander import ClickHouseLander
from tests.sinks.fakes import FakeBackend
from tests.sinks.samples import incident, step


class FakeStream:
    """What run_batches uses of a Faust stream: noack_take and ack."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches
        self.acked: list[int] = []

    async def noack_take(self, size: int, within: float) -> AsyncIterator[list[int]]:
        for batch in self.batches:
            yield batch

    async def ack(self, event: int) -> None:
        self.acked.append(event)


def _no_crash(reason: BaseException) -> None:
    pytest.fail(f"unexpected crash: {reason!r}")


def test_batches_are_acked_in_order_only_after_they_are_stored() -> None:
    stream = FakeStream([[1, 2, 3], [4, 5]])
    stored: list[list[int]] = []

    async def land(events: list[Any]) -> None:
        assert stream.acked == [e for batch in stored for e in batch]  # nothing of this batch acked yet
        stored.append(list(events))

    asyncio.run(run_batches(stream, 10, 1.0, land, crash=_no_crash))
    assert stream.acked == [1, 2, 3, 4, 5]


def test_a_failed_batch_is_never_acked_and_crashes_the_process() -> None:
    stream = FakeStream([[1, 2], [3, 4], [5]])
    crashes: list[BaseException] = []

    async def land(events: list[Any]) -> None:
        if 3 in events:
            raise RuntimeError("a bug")

    asyncio.run(run_batches(stream, 10, 1.0, land, crash=crashes.append))
    assert stream.acked == [1, 2]  # the failed batch and everything after it stay un-acked
    assert [str(c) for c in crashes] == ["a bug"]


def test_cancellation_is_not_a_crash() -> None:
    stream = FakeStream([[1]])

    async def land(events: list[Any]) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run_batches(stream, 10, 1.0, land, crash=_no_crash))
    assert stream.acked == []


def test_the_lander_retries_until_the_rows_land_and_never_writes_a_row_twice() -> None:
    settings = load_settings({})
    lander = ClickHouseLander(settings, max_backoff_s=0.01)
    backend = FakeBackend()
    lander._writer = BatchingWriter(backend, max_rows=2, max_seconds=0.01, max_buffered_rows=3)
    backend.fail = True
    batch = [row_for(step(rank=r), 1) for r in range(5)] + [row_for(incident(), 1)]

    async def write_while_down_then_recover() -> None:
        task = asyncio.create_task(lander.write(batch))
        while lander.write_failures < 3:  # the backend keeps failing: write keeps retrying
            await asyncio.sleep(0.01)
        assert not task.done()
        backend.fail = False
        await asyncio.wait_for(task, timeout=60)

    try:
        asyncio.run(write_while_down_then_recover())
    finally:
        lander.close()
    assert sorted(backend.rows("steps")) == sorted(tr.row for tr in batch[:5])  # each exactly once
    assert backend.rows("incidents") == [batch[5].row]


def test_crash_process_exits_the_whole_process_with_its_status() -> None:
    code = "from streams.land_app import crash_process; crash_process(RuntimeError('boom')); print('survived')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == CRASH_EXIT_CODE
    assert "survived" not in done.stdout
    assert "boom" in done.stderr
