"""The embedded backend's columnar (ArrowStream) insert stores exactly what the JSON insert stores.

The same rows (the contract docs' examples of every stored type, the throughput bench's
events with their edge values, a dead letter, extreme integers, unicode and NUL bytes) go
through a columnar backend and a JSON-only one (two databases on one chdb path); every
table, rollups included, must read back identical. Rows Arrow would store differently
(raw bytes, a null in a non-Nullable column, a value outside its type) must take the JSON
path and keep its behaviour.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from bench.throughput import Job
from schemas import ContractError, Topics, decode
from sinks import rows
from sinks.backend import SinkError
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import STEP_COLUMNS, Row, TableRow
from streams.land.processor import Landed, LandingProcessor
from tests.schemas.test_contract_fuzz import EXAMPLES
from tests.sinks.samples import step

pytestmark = pytest.mark.clickhouse

NOW = 1_767_225_600_123_456_789


def _rows() -> list[TableRow]:
    out: list[TableRow] = []
    for doc in EXAMPLES:
        try:
            out.extend(rows.rows_for(decode(orjson.dumps(doc)), NOW))
        except (ContractError, rows.RowError):
            continue  # a type without a table: nothing to insert
    topics = Topics("t.")
    proc = LandingProcessor(topics, 1 << 20)
    landed = Landed()
    kind_topic = {"steps": topics.steps, "kernels": topics.kernel_summaries, "device": topics.device}
    for offset, (kind, key, value) in enumerate(Job("columnar", 64).step(7, 300.0)):
        proc.process(kind_topic[kind], 0, offset, key, value, NOW, landed)
    proc.process(topics.steps, 0, 999, b"k", b"\x00not json \xe2\x82\xac", NOW, landed)  # a dead letter
    out.extend(landed.rows)
    extreme = list(rows.row_for(step(job="j\u00e9\x00'\"\\\n", host="h\U0001f600"), NOW).row)
    extreme[STEP_COLUMNS.index("step")] = 2**64 - 1
    extreme[STEP_COLUMNS.index("start_ns")] = 1
    out.append(TableRow(rows.STEPS_TABLE, STEP_COLUMNS, tuple(extreme)))
    return out


def _dump(backend: EmbeddedBackend) -> dict[str, list[tuple[object, ...]]]:
    tables = [name for (name,) in backend.query(
        "SELECT name FROM system.tables WHERE database = %(db)s AND engine LIKE '%%MergeTree'"
        " AND name != 'schema_migrations'",  # applied_ns: when each backend migrated
        {"db": backend.database})]
    out = {}
    for table in tables:
        cols = [name for (name,) in backend.query(
            "SELECT name FROM system.columns WHERE database = %(db)s AND table = %(t)s AND type NOT LIKE 'Aggregate%%'",
            {"db": backend.database, "t": table})]
        if not cols:
            continue
        # aggregate states are compared through their finalised values
        aggs = [name for (name,) in backend.query(
            "SELECT name FROM system.columns WHERE database = %(db)s AND table = %(t)s AND type LIKE 'Aggregate%%'",
            {"db": backend.database, "t": table})]
        select = ", ".join([f"`{c}`" for c in cols] + [f"toString(finalizeAggregation(`{a}`))" for a in aggs])
        out[table] = sorted(backend.query(f"SELECT {select} FROM `{backend.database}`.`{table}`"), key=repr)
    return out


def test_columnar_and_json_inserts_store_identical_tables(tmp_path: Path) -> None:
    by_table: dict[tuple[str, tuple[str, ...]], list[Row]] = defaultdict(list)
    for tr in _rows():
        by_table[(tr.table, tr.columns)].append(tr.row)
    assert {table for table, _ in by_table} >= {"steps", "kernel_summaries", "device_samples", "dead_letters",
                                                "incidents", "jobs"}
    path = tmp_path / "chdb"
    with EmbeddedBackend(path, "viaarrow") as arrow, EmbeddedBackend(path, "viajson", columnar=False) as plain:
        for backend in (arrow, plain):
            migrate(backend)
            backend.inserts_by_format.clear()  # the migrations' own bookkeeping rows
            for index, ((table, columns), batch) in enumerate(sorted(by_table.items())):
                backend.insert(table, columns, batch, dedup_token=f"t:0:{index}-{index}")
        assert arrow.inserts_by_format == {"ArrowStream": len(by_table)}
        assert "ArrowStream" not in plain.inserts_by_format
        stored = _dump(arrow)
        assert stored["steps"] and stored["steps_by_step"]
        assert stored == _dump(plain)


def test_rows_arrow_cannot_hold_exactly_take_the_json_path(tmp_path: Path) -> None:
    with EmbeddedBackend(tmp_path / "chdb") as backend:
        migrate(backend)
        backend.inserts_by_format.clear()
        good = rows.row_for(step(), NOW)
        raw = list(good.row)
        raw[STEP_COLUMNS.index("host")] = b"raw"
        with pytest.raises(SinkError, match="base64"):  # JSON's own refusal, not bytes stored as text
            backend.insert("steps", STEP_COLUMNS, [tuple(raw)])
        too_big = list(good.row)
        too_big[STEP_COLUMNS.index("device")] = 70_000  # UInt16: Arrow refuses, the engine's JSON parser decides
        backend.insert("steps", STEP_COLUMNS, [tuple(too_big)])
        assert backend.inserts_by_format == {"JSONCompactEachRow": 1}
        backend.insert("steps", STEP_COLUMNS, [good.row])
        assert backend.inserts_by_format == {"JSONCompactEachRow": 1, "ArrowStream": 1}
