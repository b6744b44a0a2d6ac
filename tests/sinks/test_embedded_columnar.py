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

import pytest

from sinks import rows
from sinks.backend import SinkError
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import STEP_COLUMNS, Row
from tests.sinks.columnar_cases import NOW, dump_tables, table_rows
from tests.sinks.samples import step

pytestmark = pytest.mark.clickhouse


def test_columnar_and_json_inserts_store_identical_tables(tmp_path: Path) -> None:
    by_table: dict[tuple[str, tuple[str, ...]], list[Row]] = defaultdict(list)
    for tr in table_rows():
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
        stored = dump_tables(arrow)
        assert stored["steps"] and stored["steps_by_step"]
        assert stored == dump_tables(plain)


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
