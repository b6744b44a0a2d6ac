"""The server backend's Arrow insert (`insert_arrow`, column by column) stores exactly what its row insert stores.

On the real ClickHouse 18.16 server, the same blocks go into three databases: as rows (`insert` of
`arrow_rows`, what the writer sent before), as numpy columns (`insert_arrow`, the default) and as a
list per column (`ServerBackend(numpy=False)`); every table, rollups included, must read back
identical. The blocks: the landing worker's own step, device and kernel-summary blocks (`process_batch`: int64
columns cast to the tables' types), blocks of the extremes of every column type of those two tables
(nulls, all-null and null-free Nullable columns, the ends of every integer type, nanosecond
timestamps, the first and last Date, unicode and NUL bytes, empty strings), and rows of every stored
table typed from the table's own columns (arrays, empty ones included, and Nullable strings: the list
path). Blocks Arrow cannot hold exactly take the row insert and keep its behaviour.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pytest

from bench.land_split import batches, blocks
from sinks.backend import ArrowInserts, SinkError, arrow_rows, arrow_type, column_types, quote_identifier
from sinks.migrations.runner import migrate
from sinks.rows import DEVICE_SAMPLE_COLUMNS, STEP_COLUMNS, Row
from sinks.server import ServerBackend
from sinks.writer import BatchingWriter
from tests.sinks.columnar_cases import dump_tables, table_rows
from tests.sinks.samples import TRICKY_TEXT

pytestmark = [pytest.mark.integration, pytest.mark.clickhouse]

I64, U64 = 2**63 - 1, 2**64 - 1
LAST_DATE = dt.date(2149, 6, 6)
NUMPY_TABLES = ("steps", "device_samples", "dead_letters", "profiles", "actions")  # no Array column: numpy columns


@pytest.fixture
def three(clickhouse_server_url: str, unique_name: str) -> Iterator[tuple[ServerBackend, ...]]:
    """Migrated databases for the rows, the numpy columns and the list columns."""
    backends = (ServerBackend(clickhouse_server_url, f"steplens_{unique_name}_rows"),
                ServerBackend(clickhouse_server_url, f"steplens_{unique_name}_numpy"),
                ServerBackend(clickhouse_server_url, f"steplens_{unique_name}_lists", numpy=False))
    try:
        for backend in backends:
            migrate(backend)
            backend.inserts_by_kind.clear()  # the migrations' own bookkeeping rows
        yield backends
    finally:
        for backend in backends:
            backend.execute(f"DROP DATABASE IF EXISTS {quote_identifier(backend.database)}")
            backend.close()


def _block(columns: Sequence[str], rows: Sequence[Sequence[object]], types: dict[str, pa.DataType]) -> pa.Table:
    """`rows` as an Arrow table, each column of the type `types` names (int64 for the rest, as the land path)."""
    by_column = list(zip(*rows, strict=True))
    return pa.table({c: pa.array(values, type=types.get(c, pa.int64())) for c, values in zip(columns, by_column,
                                                                                         strict=True)})


def _step_extremes() -> pa.Table:
    base = {"job": "j", "rank": 0, "step": 0, "world": 1, "host": "h", "device": 0, "dp_group": -1, "tp_group": -1,
            "pp_group": -1, "ep_group": -1, "cp_group": -1, "pp_stage": -1, "start_ns": 1, "end_ns": 1,
            "duration_ms": 0.0, "data_ms": None, "forward_ms": None, "backward_ms": None, "grad_ms": None,
            "optimizer_ms": None, "comm_exposed_ms": None, "interstep_cpu_ms": None, "gc_ms": None,
            "gc_count": None, "batch_size": None, "samples": None, "tokens": None, "flops": None,
            "peak_flops": None, "profiling": 0, "event_date": dt.date(1970, 1, 1), "ingested_ns": 0, "attempt": 0,
            "mem_peak_bytes": None, "mem_reserved_bytes": None, "mem_capacity_bytes": None}
    top = {**base, "job": "j\u00e9\x00'\"\\\n" + TRICKY_TEXT, "host": "h\U0001f600", "rank": 2**32 - 1, "step": U64,
           "world": 2**32 - 1, "device": 2**16 - 1, "dp_group": 2**31 - 1, "tp_group": 2**31 - 1,
           "pp_group": 2**31 - 1, "ep_group": 2**31 - 1, "cp_group": 2**31 - 1, "pp_stage": 2**15 - 1,
           "start_ns": 1_767_225_600_123_456_789, "end_ns": I64, "duration_ms": 1.7976931348623157e308,
           "data_ms": 5e-324, "forward_ms": 1.7976931348623157e308, "backward_ms": 0.1 + 0.2,
           "grad_ms": 123.456789012345678, "optimizer_ms": -0.0, "comm_exposed_ms": 0.0,
           "interstep_cpu_ms": 1e-300, "gc_ms": 2.5, "gc_count": U64, "batch_size": 0, "samples": I64,
           "tokens": 2**53 + 1, "flops": 1.5e15, "peak_flops": 0.0, "profiling": 1, "event_date": LAST_DATE,
           "ingested_ns": 1_767_225_600_999_999_999, "attempt": 2**16 - 1, "mem_peak_bytes": I64,
           "mem_reserved_bytes": 0, "mem_capacity_bytes": 96 * 2**30}
    bottom = {**base, "job": "", "host": "", "dp_group": -2**31, "tp_group": -2**31, "pp_group": -2**31,
              "ep_group": -2**31, "cp_group": -2**31, "pp_stage": -2**15, "start_ns": -2**63, "end_ns": -2**63,
              "duration_ms": -1.7976931348623157e308, "gc_count": 0, "tokens": 1, "data_ms": 0.0,
              "ingested_ns": -2**63, "mem_peak_bytes": 0, "mem_reserved_bytes": I64,
              "mem_capacity_bytes": I64}
    rows = [[r[c] for c in STEP_COLUMNS] for r in (top, bottom, base, {**top, "rank": 1, "gc_count": None})]
    return _block(STEP_COLUMNS, rows, {"job": pa.string(), "host": pa.string(), "step": pa.uint64(),
                                       "gc_count": pa.uint64(), "profiling": pa.uint8(), "event_date": pa.date32(),
                                       **{c: pa.float64() for c in STEP_COLUMNS
                                          if c.endswith("_ms") or c in ("flops", "peak_flops")}})


def _device_extremes() -> pa.Table:
    metrics = DEVICE_SAMPLE_COLUMNS[6:14]
    rows = [
        ["h\U0001f600\x00", 2**16 - 1, I64, TRICKY_TEXT, I64, "Ascend910B\u00e9", *([1.7976931348623157e308] * 8),
         LAST_DATE, 1_767_225_600_000_000_001],
        ["", 0, -2**63, "", -2**63, "", *([None] * 8), dt.date(1970, 1, 1), -2**63],
        ["h", 1, 1, "j", -1, "k", 5e-324, None, 0.0, None, -0.0, 99.99999999999999, None, 1e-300,
         dt.date(2026, 1, 1), 0],
    ]
    return _block(DEVICE_SAMPLE_COLUMNS, rows, {"host": pa.string(), "job": pa.string(), "device_kind": pa.string(),
                                                "event_date": pa.date32(), **{m: pa.float64() for m in metrics}})


def _typed(backend: ServerBackend, table: str, columns: Sequence[str], rows: list[Row]) -> pa.Table:
    """`rows` as an Arrow table typed from `table`'s own columns (arrays, Nullable strings: every stored type)."""
    types = column_types(backend, table)
    mapped = [arrow_type(types[c]) for c in columns]
    return _block(columns, rows, {c: m[0] for c, m in zip(columns, mapped, strict=True) if m is not None})


def test_the_server_takes_arrow_blocks_and_stores_what_its_row_insert_stores(
        three: tuple[ServerBackend, ...]) -> None:
    as_rows, as_numpy, as_lists = three
    assert isinstance(as_numpy, ArrowInserts)  # the writer hands it the land worker's blocks as they are
    landed = blocks(batches(64, 3, "step") + batches(64, 3, "device") + batches(64, 3, "kernels"))
    assert {b.table for b in landed} == {"steps", "device_samples", "kernel_summaries"}
    steps = [(b.table, b.columns, b.data) for b in landed]
    steps += [("steps", STEP_COLUMNS, _step_extremes()), ("device_samples", DEVICE_SAMPLE_COLUMNS,
                                                          _device_extremes())]
    by_table: dict[tuple[str, tuple[str, ...]], list[Row]] = defaultdict(list)
    for tr in table_rows():
        by_table[(tr.table, tr.columns)].append(tr.row)
    typed = [(table, columns, _typed(as_rows, table, columns, rs)) for (table, columns), rs in sorted(by_table.items())]
    assert {t for t, _, _ in typed} >= {"steps", "kernel_summaries", "device_samples", "dead_letters", "incidents",
                                        "jobs"}
    for index, (table, columns, data) in enumerate(steps + typed):
        token = f"t:0:{index}-{index}"
        as_rows.insert(table, columns, arrow_rows(data), dedup_token=token)
        as_numpy.insert_arrow(table, columns, data, dedup_token=token)
        as_lists.insert_arrow(table, columns, data, dedup_token=token)
    with_arrays = sum(1 for t, _, _ in steps + typed if t not in NUMPY_TABLES)  # these have Array columns
    assert with_arrays > len([t for t, _, _ in typed if t not in NUMPY_TABLES])  # the landed kernel blocks too
    assert as_rows.inserts_by_kind == {"rows": len(steps) + len(typed)}
    assert as_numpy.inserts_by_kind == {"numpy": len(steps) + len(typed) - with_arrays, "columns": with_arrays}
    assert as_lists.inserts_by_kind == {"columns": len(steps) + len(typed)}
    stored = dump_tables(as_rows)
    assert len(stored["steps"]) > 64 * 3 and stored["device_samples"] and stored["steps_by_step"]
    assert len(stored["kernel_summaries"]) > 64 * 3 * 2  # the landed blocks' rows (2 aggregates a summary)
    assert dump_tables(as_numpy) == stored
    assert dump_tables(as_lists) == stored


def test_a_block_arrow_cannot_hold_takes_the_row_insert(server_backend: ServerBackend) -> None:
    (good,) = blocks(batches(4, 1, "step"))
    with pytest.raises(SinkError, match="Code: 60"):  # no table yet: the row insert's UNKNOWN_TABLE
        server_backend.insert_arrow("steps", STEP_COLUMNS, good.data)
    migrate(server_backend)
    server_backend.inserts_by_kind.clear()
    rank = STEP_COLUMNS.index("rank")
    negative = good.data.set_column(rank, "rank", pa.array([-1, 0, 1, 2], pa.int64()))  # UInt32
    with pytest.raises(SinkError) as by_arrow:
        server_backend.insert_arrow("steps", STEP_COLUMNS, negative)
    with pytest.raises(SinkError) as by_rows:
        server_backend.insert("steps", STEP_COLUMNS, arrow_rows(negative))
    assert str(by_arrow.value) == str(by_rows.value)  # the row insert's own refusal
    assert server_backend.inserts_by_kind == {}
    host = STEP_COLUMNS.index("host")
    missing = good.data.set_column(host, "host", pa.array(["a", None, "b", "c"], pa.string()))  # not Nullable
    with pytest.raises(SinkError, match="insert failed on table steps: cannot encode a value"):
        server_backend.insert_arrow("steps", STEP_COLUMNS, missing)  # the row insert's refusal, a SinkError now
    day = STEP_COLUMNS.index("event_date")
    late = good.data.set_column(day, "event_date", pa.array([dt.date(2200, 1, 1)] * 4, pa.date32()))
    server_backend.insert_arrow("steps", STEP_COLUMNS, late)  # numpy would wrap the day count: rows store 1970-01-01
    assert server_backend.inserts_by_kind == {"rows": 1}
    assert server_backend.query(f"SELECT DISTINCT event_date FROM {quote_identifier(server_backend.database)}.steps"
                                ) == [(dt.date(1970, 1, 1),)]
    server_backend.insert_arrow("steps", STEP_COLUMNS, good.data)
    assert server_backend.inserts_by_kind == {"rows": 1, "numpy": 1}


def test_settings_and_the_dedup_token_reach_the_server_as_the_row_insert_sends_them(
        server_backend: ServerBackend) -> None:
    """18.16 honours no token, so the backend sends none there; told the server is 22.2+, the Arrow insert
    sends the row insert's dedup settings, which 18.16 refuses by name (the driver drops the token itself
    before an 18.16 server, as an unknown setting)."""
    migrate(server_backend)
    (block,) = blocks(batches(4, 1, "device"))
    with pytest.raises(SinkError, match="readonly mode"):
        server_backend.insert_arrow("device_samples", DEVICE_SAMPLE_COLUMNS, block.data, settings={"readonly": 1})
    server_backend._version = (22, 2, 0)
    for insert in (lambda: server_backend.insert("device_samples", DEVICE_SAMPLE_COLUMNS, arrow_rows(block.data),
                                                 dedup_token="t:0:0-3"),
                   lambda: server_backend.insert_arrow("device_samples", DEVICE_SAMPLE_COLUMNS, block.data,
                                                       dedup_token="t:0:0-3")):
        with pytest.raises(SinkError, match="Unknown setting deduplicate_blocks_in_dependent_materialized_views"):
            insert()
    assert server_backend.query(f"SELECT count() FROM {quote_identifier(server_backend.database)}.device_samples"
                                ) == [(0,)]


def test_the_writer_lands_a_block_columnar_on_the_server(server_backend: ServerBackend) -> None:
    migrate(server_backend)
    server_backend.inserts_by_kind.clear()
    landed = blocks(batches(16, 2, "step"))
    writer = BatchingWriter(server_backend, 10**6, 60.0, 10**7)
    for block in landed:
        writer.add_block(block)
    assert writer.flush() == {"steps": 16 * 2}
    assert server_backend.inserts_by_kind == {"numpy": 1}  # one insert of both blocks, no row per event


def test_low_cardinality_columns_of_newer_servers_go_as_numpy_columns(server_backend: ServerBackend) -> None:
    """From 19.3 job and host are LowCardinality(String) (`Features.dictionary`); 18.16 has the type behind a
    setting, which is enough to check clickhouse-driver's numpy dictionary encoding against the row insert."""
    table = f"{quote_identifier(server_backend.database)}.lc"
    server_backend._client.execute(
        f"CREATE TABLE {table} (n UInt32, s LowCardinality(String), o LowCardinality(Nullable(String)), "
        "x Nullable(Float64)) ENGINE = MergeTree ORDER BY n", settings={"allow_experimental_low_cardinality_type": 1})
    columns = ("n", "s", "o", "x")
    rows = [(i, ["a", "", TRICKY_TEXT][i % 3], [None, "p", "\u00e9"][i % 3], None if i % 2 else i / 3)
            for i in range(300)]
    data = _block(columns, rows, {"n": pa.uint32(), "s": pa.string(), "o": pa.string(), "x": pa.float64()})
    server_backend.insert_arrow("lc", columns, data)
    assert server_backend.inserts_by_kind == {"numpy": 1}
    assert sorted(server_backend.query(f"SELECT n, s, o, x FROM {table}")) == rows
