"""Row mappings of the contract-1.1 event types (pure)."""

from __future__ import annotations

import pytest

from schemas import DeviceSample, KernelSummary
from sinks import rows
from sinks.rows import TABLE_COLUMNS, RowError, rows_for
from tests.steplens.fleet_data import T0, all_events


def test_every_event_type_maps_to_rows_of_its_table_width() -> None:
    seen = set()
    for event in all_events():
        mapped = rows_for(event, T0)
        assert mapped, type(event).__name__
        for table_row in mapped:
            assert table_row.columns == TABLE_COLUMNS[table_row.table]
            assert len(table_row.row) == len(table_row.columns)
            seen.add(table_row.table)
    assert seen == set(TABLE_COLUMNS) - {"dead_letters"}


def test_kernel_summary_rows_one_per_aggregate_or_one_placeholder() -> None:
    summary = next(e for e in all_events() if isinstance(e, KernelSummary))
    mapped = rows.kernel_summary_rows(summary, T0)
    entry = rows.KERNEL_SUMMARY_COLUMNS.index("entry")
    assert [r[entry] for r in mapped] == list(range(len(summary.entries)))
    empty = KernelSummary(job="j", rank=0, world=1, host="h", device=0, step=1, entries=[], other_count=3)
    (row,) = rows.kernel_summary_rows(empty, T0)
    assert row[entry] == -1 and row[rows.KERNEL_SUMMARY_COLUMNS.index("other_count")] == 3


def test_values_that_do_not_fit_name_their_field() -> None:
    with pytest.raises(RowError) as err:
        rows_for(DeviceSample(host="h", device=70_000, ts_ns=T0), T0)
    assert err.value.field == "device"
    with pytest.raises(RowError, match="no ClickHouse table"):  # multi-row types go through rows_for
        rows.row_for(DeviceSample(host="h", device=1, ts_ns=T0), T0)
