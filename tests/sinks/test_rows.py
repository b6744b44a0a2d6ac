"""The pure event -> row mapping."""

from __future__ import annotations

import base64
import datetime as dt

import pytest

from schemas import Domain, Phases
from sinks.rows import (
    DEAD_LETTER_COLUMNS,
    INCIDENT_COLUMNS,
    JOB_COLUMNS,
    NO_GROUP,
    STEP_COLUMNS,
    TABLE_COLUMNS,
    RowError,
    dead_letter,
    dead_letter_row,
    event_date,
    incident_row,
    job_row,
    row_for,
    step_row,
)
from tests.sinks.samples import T0, TRICKY_TEXT, incident, job, step


def as_dict(columns: tuple[str, ...], row: tuple[object, ...]) -> dict[str, object]:
    assert len(columns) == len(row)
    return dict(zip(columns, row, strict=True))


def test_column_lists_have_no_duplicates() -> None:
    for table, columns in TABLE_COLUMNS.items():
        assert len(set(columns)) == len(columns), table


def test_step_row_maps_every_field() -> None:
    row = as_dict(STEP_COLUMNS, step_row(step(), ingested_ns=T0 + 5))
    assert row["job"] == "job-a"
    assert (row["rank"], row["step"], row["world"], row["host"], row["device"]) == (3, 10, 8, "node-1", 3)
    assert (row["dp_group"], row["tp_group"], row["pp_group"]) == (1, 0, 2)
    assert row["ep_group"] == NO_GROUP and row["cp_group"] == NO_GROUP
    assert row["pp_stage"] == 1
    assert (row["start_ns"], row["end_ns"]) == (T0, T0 + 1_250_000_000)
    assert row["duration_ms"] == pytest.approx(1250.0)
    assert row["data_ms"] == 1.5 and row["backward_ms"] == 700.25 and row["gc_ms"] == 0.0
    assert row["grad_ms"] is None and row["comm_exposed_ms"] is None and row["interstep_cpu_ms"] is None
    assert (row["gc_count"], row["batch_size"], row["samples"], row["tokens"]) == (2, 32, None, 65536)
    assert row["flops"] == 1.5e15 and row["peak_flops"] is None
    assert row["profiling"] == 1
    assert row["event_date"] == dt.date(2024, 6, 10)
    assert row["ingested_ns"] == T0 + 5


def test_step_phase_columns_follow_the_contract() -> None:
    start = STEP_COLUMNS.index("duration_ms") + 1
    assert STEP_COLUMNS[start : start + len(Phases.NAMES)] == Phases.NAMES


def test_step_without_domains_has_no_groups_and_no_stage() -> None:
    row = as_dict(STEP_COLUMNS, step_row(step(domains={}, profiling=False), ingested_ns=1))
    assert [row[f"{d}_group"] for d in ("dp", "tp", "pp", "ep", "cp")] == [NO_GROUP] * 5
    assert row["pp_stage"] == NO_GROUP
    assert row["profiling"] == 0


def test_step_values_outside_their_columns_are_row_errors() -> None:
    with pytest.raises(RowError) as info:
        step_row(step(device=70_000), ingested_ns=1)
    assert info.value.field == "device"
    with pytest.raises(RowError) as info:
        step_row(step(domains={"pp": Domain(group=1, size=40_000, index=39_999)}), ingested_ns=1)
    assert info.value.field == "domains.pp.index"
    with pytest.raises(RowError):
        step_row(step(step=2**64), ingested_ns=1)


def test_incident_row_flattens_evidence_into_sorted_parallel_arrays() -> None:
    row = as_dict(INCIDENT_COLUMNS, incident_row(incident()))
    assert row["evidence_keys"] == ["wait_ratio", "z"]
    assert row["evidence_values"] == [0.2, 4.5]
    assert row["ranks"] == [3, 7]
    assert (row["group"], row["device"]) == (1, 3)
    assert (row["step_first"], row["step_last"]) == (10, 12)
    assert row["detected_ns"] == T0 and row["event_date"] == dt.date(2024, 6, 10)


def test_incident_without_optional_fields_uses_nulls_and_minus_one() -> None:
    bare = incident(
        metric=None, domain=None, group=None, ranks=[], host=None, device=None, step_first=None,
        step_last=None, observed=None, expected=None, threshold=None, unit=None, evidence={},
        cause=None, suggestion=None,
    )
    row = as_dict(INCIDENT_COLUMNS, incident_row(bare))
    assert row["group"] == NO_GROUP and row["device"] == NO_GROUP
    assert row["ranks"] == [] and row["evidence_keys"] == [] and row["evidence_values"] == []
    for name in ("metric", "domain", "host", "step_first", "step_last", "observed", "unit", "cause"):
        assert row[name] is None, name


def test_job_row() -> None:
    row = as_dict(JOB_COLUMNS, job_row(job(phase="end", last_step=99)))
    assert row["parallel_keys"] == ["dp", "tp"] and row["parallel_values"] == [2, 4]
    assert (row["phase"], row["last_step"], row["model"]) == ("end", 99, "llama-7b")
    assert row["event_date"] == dt.date(2024, 6, 10)


def test_dead_letter_keeps_raw_bytes_exactly() -> None:
    raw = b'{"type": "step", \xff\xfe not utf-8 \x00' + TRICKY_TEXT.encode()
    row = as_dict(
        DEAD_LETTER_COLUMNS,
        dead_letter_row("steplens.steps", 2, 41, b"job-a/3", raw, "invalid JSON", "<payload>", T0),
    )
    assert isinstance(row["payload_b64"], str)
    assert base64.b64decode(row["payload_b64"]) == raw
    assert row["payload_bytes"] == len(raw)
    assert row["key"] == "job-a/3" and row["key_b64"] == base64.b64encode(b"job-a/3").decode()
    assert (row["topic"], row["partition"], row["offset"]) == ("steplens.steps", 2, 41)


def test_dead_letter_keys_that_are_not_text_or_absent() -> None:
    binary = as_dict(DEAD_LETTER_COLUMNS, dead_letter_row("t", 0, 0, b"\xff\x00", b"", "r", "f", 1))
    assert binary["key"] == "" and binary["key_b64"] == base64.b64encode(b"\xff\x00").decode()
    none = as_dict(DEAD_LETTER_COLUMNS, dead_letter_row("t", 0, 0, None, b"", "r", "f", 1))
    assert none["key"] == "" and none["key_b64"] is None
    assert none["payload_b64"] == "" and none["payload_bytes"] == 0


def test_event_date_is_utc_and_clamped_to_the_date_type() -> None:
    assert event_date(0) == dt.date(1970, 1, 1)
    assert event_date(-5) == dt.date(1970, 1, 1)
    assert event_date(86_400 * 10**9 - 1) == dt.date(1970, 1, 1)
    assert event_date(86_400 * 10**9) == dt.date(1970, 1, 2)
    assert event_date(2**63 - 1) == dt.date(2149, 6, 6)


def test_row_for_routes_each_stored_type() -> None:
    assert row_for(step(), 7).table == "steps"
    assert row_for(step(), 7).row == step_row(step(), 7)
    assert row_for(incident(), 7).columns == INCIDENT_COLUMNS
    assert row_for(job(), 7).table == "jobs"
    assert dead_letter("t", 0, 1, None, b"x", "r", "f", 1).table == "dead_letters"


def test_row_for_rejects_types_that_are_not_stored_with_a_row_error() -> None:
    class Unmapped:
        TYPE = "unmapped"

    with pytest.raises(RowError, match="'unmapped' events have no ClickHouse table") as info:
        row_for(Unmapped(), 1)
    assert info.value.field == "type"


def test_rows_hold_only_plain_values() -> None:
    allowed = (int, float, str, list, dt.date, type(None))
    for table_row in (row_for(step(), 1), row_for(incident(), 1), row_for(job(), 1)):
        assert all(isinstance(v, allowed) for v in table_row.row), table_row.table
