"""What the columnar insert tests of both backends share: rows of every stored table, and a table dump.

`table_rows` gives the contract docs' examples of every stored type, the throughput bench's events with
their edge values (landed record by record), a dead letter and a step row with extreme values, unicode
and NUL bytes; `dump_tables` reads every MergeTree table of a backend's database back (rollups'
aggregate states through their finalised values), sorted, so two databases compare with ``==``.
"""

from __future__ import annotations

import orjson

from bench.throughput import Job
from schemas import ContractError, Topics, decode
from sinks import rows
from sinks.backend import Backend
from sinks.rows import STEP_COLUMNS, TableRow
from streams.land.processor import Landed, LandingProcessor
from tests.schemas.test_contract_fuzz import EXAMPLES
from tests.sinks.samples import step

NOW = 1_767_225_600_123_456_789


def table_rows() -> list[TableRow]:
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


def dump_tables(backend: Backend) -> dict[str, list[tuple[object, ...]]]:
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
