"""EmbeddedBackend (chdb on a directory): persistence, sharing rules, value conversion."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from sinks.backend import SinkError
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import STEP_COLUMNS, row_for
from tests.sinks.samples import step

pytestmark = pytest.mark.clickhouse


def test_data_persists_across_sessions(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with EmbeddedBackend(path, "sl") as first:
        migrate(first)
        tr = row_for(step(), 1)
        first.insert(tr.table, tr.columns, [tr.row])
    with EmbeddedBackend(path, "sl") as second:
        assert migrate(second) == []
        assert second.query("SELECT count() FROM sl.steps FINAL") == [(1,)]


def test_version_is_the_embedded_engine(embedded_backend: EmbeddedBackend) -> None:
    major, _, _ = embedded_backend.version()
    assert major >= 24


def test_values_convert_to_python_types(embedded_backend: EmbeddedBackend) -> None:
    rows = embedded_backend.query(
        "SELECT toUInt64(18446744073709551615), toInt64(-9223372036854775808), 0.1 + 0.2, "
        "[toDate('2024-01-02')], CAST(NULL, 'Nullable(Date)'), toDateTime('2024-01-02 03:04:05', 'UTC'), "
        "CAST('x', 'LowCardinality(Nullable(String))'), [[1, 2], []]"
    )
    assert rows == [
        (
            2**64 - 1, -(2**63), 0.30000000000000004, [dt.date(2024, 1, 2)], None,
            dt.datetime(2024, 1, 2, 3, 4, 5), "x", [[1, 2], []],
        )
    ]
    assert embedded_backend.query("SELECT 1 WHERE 0") == []


def test_a_second_path_in_the_same_process_is_refused_while_one_is_open(
    embedded_backend: EmbeddedBackend, tmp_path: Path
) -> None:
    with pytest.raises(SinkError, match="close it first"):
        EmbeddedBackend(tmp_path / "other", "sl")
    # a second backend on the same path is fine
    with EmbeddedBackend(embedded_backend.path, embedded_backend.database) as same:
        assert same.query("SELECT 1") == [(1,)]
    assert embedded_backend.query("SELECT 2") == [(2,)]


def test_another_process_cannot_open_a_path_in_use(embedded_backend: EmbeddedBackend) -> None:
    script = textwrap.dedent(
        f"""
        from sinks.backend import SinkError
        from sinks.embedded import EmbeddedBackend
        try:
            EmbeddedBackend({str(embedded_backend.path)!r}, "sl")
        except SinkError as exc:
            print("REFUSED", exc)
        else:
            print("OPENED")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert "REFUSED" in done.stdout, done.stdout + done.stderr
    assert "another process" in done.stdout


def test_bytes_values_are_refused_with_a_clear_error(embedded_backend: EmbeddedBackend) -> None:
    migrate(embedded_backend)
    row = list(row_for(step(), 1).row)
    row[STEP_COLUMNS.index("host")] = b"raw"
    with pytest.raises(SinkError, match="base64"):
        embedded_backend.insert("steps", STEP_COLUMNS, [row])
    assert embedded_backend.query("SELECT count() FROM steplens.steps") == [(0,)]


def test_a_bad_row_does_not_leave_the_session_stuck(embedded_backend: EmbeddedBackend) -> None:
    migrate(embedded_backend)
    row = list(row_for(step(), 1).row)
    row[STEP_COLUMNS.index("rank")] = "not a number"
    with pytest.raises(SinkError, match="table steps"):
        embedded_backend.insert("steps", STEP_COLUMNS, [row])
    good = row_for(step(), 1)
    embedded_backend.insert("steps", good.columns, [good.row])
    assert embedded_backend.query("SELECT count() FROM steplens.steps") == [(1,)]


def test_a_store_open_elsewhere_reads_as_in_use(tmp_path: Path) -> None:
    """The probe a land worker runs before it joins its group (streams/__main__.py): the engine's own
    lock on <path>/status, held by an open backend, reads as busy; a closed or new store as free."""
    from sinks.embedded import EmbeddedBackend, in_use_by_another_process

    path = tmp_path / "chdb"
    assert not in_use_by_another_process(path)
    backend = EmbeddedBackend(path, "probe")
    try:
        assert in_use_by_another_process(path)
    finally:
        backend.close()
    assert not in_use_by_another_process(path)


def _hold_lock(status: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding the engine's lock as a reader does while it runs one query."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(float(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(status), str(seconds)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
    return proc


def test_a_worker_waits_out_a_reader_but_not_another_land_worker(tmp_path: Path) -> None:
    """A query (or `steplens serve` polling) that has the store open while no land worker runs holds it
    for one query: the land worker starting then waits for it (it exited 2, CI stop 50). Another land
    worker, which announces its read endpoint, turns it away at once; a reader that never lets go, after
    the wait."""
    from sinks.read_endpoint import busy_reason, endpoint_file

    path = tmp_path / "chdb"
    path.mkdir()
    reader = _hold_lock(path / "status", 1.0)
    try:
        assert busy_reason(path, wait_s=30) is None
    finally:
        reader.wait(10)
    stuck = _hold_lock(path / "status", 60)
    try:
        started = time.monotonic()
        why = busy_reason(path, wait_s=0.5)
        assert why is not None and "not a land worker" in why and time.monotonic() - started < 5
        endpoint_file(path).write_bytes(orjson.dumps({"url": "http://127.0.0.1:1", "token": "t", "pid": stuck.pid}))
        why = busy_reason(path, wait_s=30)
        assert why == f"a land worker (pid {stuck.pid}) owns it"
    finally:
        stuck.kill()
        stuck.wait(10)


def test_every_table_stores_its_small_parts_packed(tmp_path: Path) -> None:
    """m0015: one file per small part, in every MergeTree table, and the rows read back through it."""
    with EmbeddedBackend(tmp_path / "db", "sl") as backend:
        migrate(backend)
        tables = backend.query("SELECT name, create_table_query FROM system.tables "
                               "WHERE database = 'sl' AND engine LIKE '%MergeTree' AND name != 'schema_migrations'")
        assert len(tables) >= 17
        unpacked = [name for name, ddl in tables if "min_bytes_for_full_part_storage = 10485760" not in ddl]
        assert unpacked == []  # a table a later migration creates needs the same setting
        rows = [row_for(step(rank=rank), 1) for rank in range(3)]
        backend.insert(rows[0].table, rows[0].columns, [tr.row for tr in rows])
        parts = backend.query("SELECT table, part_storage_type FROM system.parts "
                              "WHERE database = 'sl' AND active AND table IN ('steps', 'steps_by_step', 'topology')")
        assert sorted(parts) == [("steps", "Packed"), ("steps_by_step", "Packed"), ("topology", "Packed")]
        assert backend.query("SELECT count(), sum(rank) FROM sl.steps FINAL") == [(3, 3)]
        assert backend.query("SELECT count() FROM sl.topology FINAL") == [(3,)]
