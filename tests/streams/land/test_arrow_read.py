"""`arrow_read.read`: the compiled reader and pyarrow's JSON reader give the landing the same struct array.

The compiled reader reads what it accepts and pyarrow the rest; on every record both read, the arrays (types,
values, nulls, nesting) and the per-record counts must be equal, and clean batches must take the compiled
path (otherwise the landing has gained nothing).
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from bench.throughput import Job
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun
from streams.land import arrow_read
from streams.land.columns import _DEVICE_SCHEMA, _SCHEMA, _SUMMARY_SCHEMA
from tests.streams.detect.ingest.test_decode_columns import BAD_RECORDS, _stream, _summary

SCHEMAS = {"step": _SCHEMA, "device": _DEVICE_SCHEMA, "kernel_summary": _SUMMARY_SCHEMA}


def _records() -> dict[str, list[bytes]]:
    """The simulator's and the throughput bench's records, by type."""
    out: dict[str, list[bytes]] = {kind: [] for kind in SCHEMAS}
    raws = _stream([SimRun(scenario_job("unstable_power", ranks=16, steps=4, seed=2, job_id="j"))])
    raws += [value for _, _, value in Job("arrow", 32).step(3, 300.0)]
    for raw in raws:
        kind = orjson.loads(raw)
        kind = (kind[0] if isinstance(kind, list) else kind)["type"]
        if kind in out:
            out[kind].append(raw)
    return out


def _same(raws: list[bytes], schema: pa.Schema) -> bool:
    """Whether the compiled reader took `raws`; asserts that pyarrow reads them the same when it did."""
    element = schema.field("e").type.value_type
    fast = arrow_read.packed.read(raws, arrow_read.spec_of(element), 4096)
    if fast is None:
        return False
    compiled, slow = arrow_read.read(raws, schema), arrow_read._read_json(raws, schema)
    assert compiled is not None and slow is not None
    assert compiled[0].type == slow[0].type
    assert compiled[0].equals(slow[0])
    assert compiled[1].tolist() == slow[1].tolist()
    return True


def test_clean_records_take_the_compiled_reader_and_read_as_pyarrow_reads_them() -> None:
    for kind, raws in _records().items():
        assert raws, kind
        assert _same(raws, SCHEMAS[kind]), kind
        assert _same(raws[:1], SCHEMAS[kind]), kind


def _kind_of(raw: bytes) -> str | None:
    try:
        doc: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    doc = doc[0] if isinstance(doc, list) and doc else doc
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if kind in SCHEMAS else None


@pytest.mark.parametrize("name", [n for n, raw in BAD_RECORDS.items() if raw is not None])
def test_a_hand_built_record_reads_alike_or_goes_to_pyarrow(name: str) -> None:
    """Odd records (nulls, escapes, wrong types, duplicate keys, deep nesting): either both readers give the same
    array, or the compiled one declines and `read` gives pyarrow's answer."""
    raw = BAD_RECORDS[name]
    for kind in {_kind_of(raw), "step", "kernel_summary"} - {None}:
        schema = SCHEMAS[str(kind)]
        if not _same([raw], schema):
            got, slow = arrow_read.read([raw], schema), arrow_read._read_json([raw], schema)
            assert (got is None) == (slow is None)
            assert got is None or slow is None or got[0].equals(slow[0])


def test_a_summary_without_aggregates_and_missing_nested_fields_read_alike() -> None:
    raws = [orjson.dumps([_summary(0, entries=[]), {**_summary(1), "domains": {}}]),
            orjson.dumps({k: v for k, v in _summary(2).items() if k not in ("domains", "other_ns")})]
    assert _same(raws, _SUMMARY_SCHEMA)


@pytest.mark.parametrize("compiled", [True, False])
def test_refuse_null_declines_a_field_that_says_null_and_not_a_name_that_contains_it(compiled: bool) -> None:
    """`refuse_null` reads a `null` from the compiled reader's states (no search through the records' bytes);
    records the compiled reader leaves to pyarrow (here: an escaped string) are still searched for it."""
    escape = "\\u0041" if not compiled else ""
    step = orjson.loads(_records()["step"][0])[0]
    named = [orjson.dumps([{**step, "job": "nullify"}]).replace(b'"nullify"', f'"nullify{escape}"'.encode())]
    said = [orjson.dumps([{**step, "flops": None}]).replace(b'"job":"', f'"job":"{escape}'.encode())]
    assert (arrow_read.packed.read(named, arrow_read.spec_of(_SCHEMA.field("e").type.value_type), 4096)
            is not None) == compiled
    assert arrow_read.read(said, _SCHEMA) is not None  # a null reads as a missing field ...
    assert arrow_read.read(said, _SCHEMA, refuse_null=True) is None  # ... unless the caller refuses it
    assert (arrow_read.read(named, _SCHEMA, refuse_null=True) is not None) == compiled
