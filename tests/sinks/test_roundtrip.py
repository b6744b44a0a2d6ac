"""Migrations plus a write/read round trip, the same on the 18.16 server and on embedded chdb."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest

from sinks.backend import Backend, SinkError, column_list, qualified
from sinks.migrations import MIGRATIONS
from sinks.migrations.runner import migrate
from sinks.rows import (
    DEAD_LETTER_COLUMNS,
    INCIDENT_COLUMNS,
    JOB_COLUMNS,
    STEP_COLUMNS,
    TABLE_COLUMNS,
    TableRow,
    dead_letter,
    row_for,
)
from sinks.writer import BatchingWriter
from tests.sinks.samples import T0, TRICKY_TEXT, incident, job, step

DAY_NS = 86_400 * 10**9


def insert(backend: Backend, *table_rows: TableRow) -> None:
    for tr in table_rows:
        backend.insert(tr.table, tr.columns, [tr.row])


def select(
    backend: Backend, table: str, columns: tuple[str, ...], where: str = "", final: bool = True
) -> list[tuple[Any, ...]]:
    sql = f"SELECT {column_list(columns)} FROM {qualified(backend.database, table)}"
    if final:
        sql += " FINAL"
    if where:
        sql += f" WHERE {where}"
    return backend.query(sql + f" ORDER BY {column_list(columns[:3])}")


def count(backend: Backend, table: str, final: bool = True) -> int:
    suffix = " FINAL" if final else ""
    ((n,),) = backend.query(f"SELECT count() FROM {qualified(backend.database, table)}{suffix}")
    return int(n)


def test_migrations_create_the_tables_once(backend: Backend) -> None:
    first = migrate(backend)
    assert first[:4] == ["0001_steps", "0002_incidents", "0003_jobs", "0004_dead_letters"]
    assert first == [m.id for m in MIGRATIONS]
    assert migrate(backend) == []
    recorded = backend.query(f"SELECT id FROM {qualified(backend.database, 'schema_migrations')} FINAL ORDER BY id")
    assert [r[0] for r in recorded] == first


def test_tables_have_exactly_the_row_columns_in_order(backend: Backend) -> None:
    migrate(backend)
    for table, columns in TABLE_COLUMNS.items():
        rows = backend.query(
            "SELECT name FROM system.columns "
            f"WHERE database = '{backend.database}' AND table = '{table}'"
        )
        assert tuple(r[0] for r in rows) == columns, table


def test_features_follow_the_engine_version(backend: Backend) -> None:
    migrate(backend)
    types = dict(
        backend.query(
            f"SELECT name, type FROM system.columns WHERE database = '{backend.database}' AND table = 'steps'"
        )
    )
    old = backend.version() < (19, 3, 0)
    assert types["job"] == ("String" if old else "LowCardinality(String)")
    assert types["start_ns"] == "Int64"
    ((create,),) = backend.query(f"SHOW CREATE TABLE {qualified(backend.database, 'steps')}")
    assert ("CODEC" in create) == (backend.version() >= (19, 1, 6))


def test_step_round_trip_every_column(backend: Backend) -> None:
    migrate(backend)
    tr = row_for(step(job=TRICKY_TEXT, host='h"ost\n2'), ingested_ns=T0 + 1)
    insert(backend, tr)
    assert select(backend, "steps", STEP_COLUMNS) == [tr.row]


def test_replayed_step_is_not_double_counted(backend: Backend) -> None:
    migrate(backend)
    event = step()
    insert(backend, row_for(event, ingested_ns=T0 + 1), row_for(step(rank=4), ingested_ns=T0 + 1))
    insert(backend, row_for(event, ingested_ns=T0 + 2))  # the same step again (a replay), in a later insert
    assert count(backend, "steps") == 2
    kept = select(backend, "steps", ("job", "rank", "step", "ingested_ns"), where="rank = 3")
    assert kept == [("job-a", 3, 10, T0 + 2)]
    ((total,),) = backend.query(f"SELECT sum(duration_ms) FROM {qualified(backend.database, 'steps')} FINAL")
    assert total == pytest.approx(2 * 1250.0)


def test_incident_update_supersedes_open(backend: Backend) -> None:
    migrate(backend)
    opened = incident(state="open", detected_ns=T0, step_last=12)
    # the update arrives 40 days later, in another month: still the same incident row under FINAL
    updated = incident(state="update", detected_ns=T0 + 40 * DAY_NS, step_last=80, observed=1300.0)
    other = incident(incident_id="inc-2", state="open", detected_ns=T0 + 5)
    insert(backend, row_for(opened, 0), row_for(other, 0))
    insert(backend, row_for(updated, 0))
    rows = select(backend, "incidents", ("incident_id", "state", "step_last", "observed"))
    assert rows == [("inc-1", "update", 80, 1300.0), ("inc-2", "open", 12, 1250.0)]
    resolved = incident(state="resolved", detected_ns=T0 + 41 * DAY_NS, step_last=85)
    insert(backend, row_for(resolved, 0))
    assert select(backend, "incidents", ("incident_id", "state", "step_last"), where="incident_id = 'inc-1'") == [
        ("inc-1", "resolved", 85)
    ]
    assert count(backend, "incidents") == 2


def test_incident_round_trip_with_awkward_strings_and_arrays(backend: Backend) -> None:
    migrate(backend)
    full = incident(
        summary=TRICKY_TEXT,
        cause="line1\nline2 'single' \"double\" `back`",
        suggestion="",
        evidence={'we"ird\nkey': 1e-300, "ünï": -2.5, "z": 4.5},
        ranks=[0, 4_294_967_295],
    )
    bare = incident(
        incident_id="inc-bare", metric=None, domain=None, group=None, ranks=[], host=None, device=None,
        step_first=None, step_last=None, observed=None, expected=None, threshold=None, unit=None,
        evidence={}, cause=None, suggestion=None,
    )
    insert(backend, row_for(full, 0), row_for(bare, 0))
    got = {row[0]: row for row in select(backend, "incidents", INCIDENT_COLUMNS)}
    assert got["inc-1"] == row_for(full, 0).row
    assert got["inc-bare"] == row_for(bare, 0).row


def test_jobs_keep_the_latest_event_per_phase(backend: Backend) -> None:
    migrate(backend)
    start = job(model=TRICKY_TEXT)
    end = job(phase="end", ts_ns=T0 + 3_600 * 10**9, last_step=999, parallel={})
    insert(backend, row_for(start, 0), row_for(end, 0))
    restarted = job(ts_ns=T0 + 100, model="llama-7b v2")
    insert(backend, row_for(restarted, 0), row_for(start, 0))  # a stale replay of the first start too
    rows = select(backend, "jobs", JOB_COLUMNS)
    assert rows == [row_for(end, 0).row, row_for(restarted, 0).row]


def test_dead_letter_payload_is_byte_exact(backend: Backend) -> None:
    migrate(backend)
    raw = bytes(range(256)) + b'{"type":"step"}\n' + TRICKY_TEXT.encode() + b"\xc3\x28\xff"
    letters = [
        dead_letter("steplens.steps", 3, 17, b"job-a/3", raw, "invalid JSON", "<payload>", T0),
        dead_letter("steplens.steps", 3, 18, b"\xff\xfe", b"", "empty", "<payload>", T0 + 1),
        dead_letter("steplens.jobs", 0, 0, None, raw[:10], "field 'world': must be >= 1", "world", T0 + 2),
    ]
    insert(backend, *letters)
    rows = select(backend, "dead_letters", DEAD_LETTER_COLUMNS, final=False)
    assert rows == sorted(tr.row for tr in letters)
    by_offset = {(r[0], r[2]): r for r in rows}
    payload = by_offset[("steplens.steps", 17)][DEAD_LETTER_COLUMNS.index("payload_b64")]
    assert base64.b64decode(payload) == raw
    assert by_offset[("steplens.steps", 17)][DEAD_LETTER_COLUMNS.index("payload_bytes")] == len(raw)
    key_b64 = by_offset[("steplens.steps", 18)][DEAD_LETTER_COLUMNS.index("key_b64")]
    assert base64.b64decode(key_b64) == b"\xff\xfe"


def test_dates_come_back_as_dates(backend: Backend) -> None:
    migrate(backend)
    insert(backend, row_for(step(), 1))
    ((day,),) = backend.query(f"SELECT event_date FROM {qualified(backend.database, 'steps')}")
    assert day == dt.date(2024, 6, 10)


def test_writer_flushes_to_the_real_backend(backend: Backend) -> None:
    migrate(backend)
    writer = BatchingWriter(backend, max_rows=50, max_seconds=60.0, max_buffered_rows=500)
    for rank in range(8):
        for s in range(25):
            writer.add_row(row_for(step(rank=rank, step=s), ingested_ns=T0))
    writer.add_row(row_for(incident(), 0))
    assert writer.due()
    assert writer.flush() == {"steps": 200, "incidents": 1}
    assert count(backend, "steps") == 200
    assert writer.rows_written == {"steps": 200, "incidents": 1}


def test_insert_into_a_missing_table_names_backend_table_and_error(backend: Backend) -> None:
    with pytest.raises(SinkError) as info:
        backend.insert("no_such_table", ["a"], [(1,)])
    err = info.value
    assert err.table == "no_such_table" and err.action == "insert"
    message = str(err)
    assert "no_such_table" in message and "60" in message  # ClickHouse's UNKNOWN_TABLE code
    assert message.startswith(("server clickhouse://", "embedded /"))


def test_bad_sql_is_a_sink_error_with_the_engine_text(backend: Backend) -> None:
    with pytest.raises(SinkError, match=r"(?i)syntax"):
        backend.query("SELEC 1")
    assert backend.query("SELECT 1") == [(1,)]  # the connection is still usable


def test_closed_backend_raises(backend: Backend) -> None:
    backend.close()
    backend.close()  # idempotent
    with pytest.raises(SinkError, match="closed"):
        backend.query("SELECT 1")
