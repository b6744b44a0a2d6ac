"""Job attempts in the tables (contract 1.4, issue #21 item 4): a relaunch re-runs steps under the
same job id; every attempt's rows are kept, the same on the 18.16 server and on embedded chdb."""

from __future__ import annotations

import time

import orjson
import pytest

from schemas import JobEvent, KernelSummary, StepEvent, encode
from schemas.kernel_summary import KernelAggregate
from sinks.backend import Backend, qualified
from sinks.fast_rows import FAST_ROWS
from sinks.migrations import MIGRATIONS, Migration
from sinks.migrations.runner import migrate
from sinks.rows import TableRow, rows_for

T0 = 1_767_225_600_000_000_000
JOB = "relaunched"


def _step(attempt: int, rank: int, step: int) -> StepEvent:
    start = T0 + (attempt * 1000 + step) * 10**9
    return StepEvent(job=JOB, rank=rank, world=2, host="node-0", device=rank, step=step, start_ns=start,
                     end_ns=start + 500_000_000, attempt=attempt)


def _summary(attempt: int, rank: int, step: int) -> KernelSummary:
    return KernelSummary(job=JOB, rank=rank, world=2, host="node-0", device=rank, step=step, attempt=attempt,
                         entries=[KernelAggregate(key="h2d", cat="memcpy", count=1, total_ns=1000, direction="h2d")])


def _insert(backend: Backend, table_rows: list[TableRow]) -> None:
    for tr in table_rows:
        backend.insert(tr.table, tr.columns, [tr.row])


def _scalar(backend: Backend, sql: str) -> object:
    ((value,),) = backend.query(sql.format(db=f"`{backend.database}`"))
    return value


@pytest.mark.clickhouse
def test_every_attempts_rows_are_kept(backend: Backend) -> None:
    migrate(backend)
    events: list[StepEvent | KernelSummary | JobEvent] = []
    for attempt, steps in ((0, range(0, 40)), (1, range(30, 50))):  # the relaunch re-runs steps 30-39
        events.append(JobEvent(job=JOB, phase="start", world=2, ts_ns=T0 + attempt, attempt=attempt))
        events += [e for s in steps for r in range(2) for e in (_step(attempt, r, s), _summary(attempt, r, s))]
    now = time.time_ns()  # kernel summaries are dated by ingestion (a TTL drops old days on 26.x)
    for i, event in enumerate(events):  # half through landing's shortcut, half through the full path
        fast = FAST_ROWS.get(type(event).TYPE)
        doc = orjson.loads(encode(event))
        rows = (fast(doc, now + i) if fast is not None and i % 2 else None) or rows_for(event, now + i)
        _insert(backend, rows)
    assert _scalar(backend, "SELECT count() FROM {db}.steps FINAL") == 2 * (40 + 20)
    assert _scalar(backend, "SELECT count() FROM {db}.steps FINAL WHERE step BETWEEN 30 AND 39") == 2 * 2 * 10
    assert _scalar(backend, "SELECT count() FROM {db}.kernel_summaries FINAL") == 2 * (40 + 20)
    assert _scalar(backend, "SELECT count() FROM {db}.jobs FINAL") == 2
    per_attempt = backend.query(qualified(backend.database, "steps_by_step").join((
        "SELECT attempt, count(), sum(n) FROM (SELECT attempt, step, countMerge(rank_steps) AS n FROM ",
        " GROUP BY attempt, step) GROUP BY attempt ORDER BY attempt")))
    assert [tuple(int(v) for v in row) for row in per_attempt] == [(0, 40, 80), (1, 20, 40)]


@pytest.mark.clickhouse
def test_a_1_3_producers_rows_are_attempt_0(backend: Backend) -> None:
    migrate(backend)
    doc = orjson.loads(encode(_step(0, 1, 7)))
    doc["v"] = "1.3"
    del doc["attempt"]
    rows = FAST_ROWS["step"](doc, T0)
    assert rows is not None
    _insert(backend, rows)
    assert backend.query(f"SELECT attempt, step FROM `{backend.database}`.steps") == [(0, 7)]


def _m0014() -> Migration:
    (found,) = [m for m in MIGRATIONS if m.id == "0014_attempts"]
    return found


@pytest.mark.clickhouse
def test_0014_applies_again_after_a_crash_before_it_was_recorded(backend: Backend) -> None:
    """ClickHouse has no ADD COLUMN IF NOT EXISTS on 18.16: the runner skips a column already added."""
    migrate(backend)
    again = Migration("9999_again", "0014 re-run", _m0014().statements)
    assert migrate(backend, (*MIGRATIONS, again)) == ["9999_again"]
    _insert(backend, rows_for(_step(1, 0, 3), T0))
    assert backend.query(f"SELECT attempt, step FROM `{backend.database}`.steps_by_step") == [(1, 3)]
