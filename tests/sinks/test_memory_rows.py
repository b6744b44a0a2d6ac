"""Contract 1.5 in the tables (issue #44 item 4): a step's device memory peak and reserved bytes, a job's
model shape, landed by the shortcut and the full path alike, the same on the 18.16 server and on chdb."""

from __future__ import annotations

import orjson
import pytest

from schemas import JobEvent, ModelShape, StepEvent, encode
from sinks.backend import Backend
from sinks.fast_rows import FAST_ROWS
from sinks.migrations import MIGRATIONS, Migration
from sinks.migrations.runner import migrate
from sinks.rows import JOB_COLUMNS, STEP_COLUMNS, TableRow, rows_for

T0 = 1_767_225_600_000_000_000
SHAPE = ModelShape(params=7_000_000_000, layers=32, hidden=4096, heads=32, seq=4096, micro_batch=1, precision=2,
                   optimizer="adam", recompute="selective", zero_stage=3, zero_degree=8, sp=True)


def _step(step: int, peak: int | None, reserved: int | None, capacity: int | None = None) -> StepEvent:
    start = T0 + step * 10**9
    return StepEvent(job="mem", rank=0, world=1, host="node-0", device=0, step=step, start_ns=start,
                     end_ns=start + 500_000_000, mem_peak_bytes=peak, mem_reserved_bytes=reserved,
                     mem_capacity_bytes=capacity)


def _insert(backend: Backend, table_rows: list[TableRow]) -> None:
    for tr in table_rows:
        backend.insert(tr.table, tr.columns, [tr.row])


def test_rows_carry_the_memory_and_the_shape() -> None:
    (step,) = rows_for(_step(3, 70 * 2**30, 2**36, 96 * 2**30), T0)
    row = dict(zip(STEP_COLUMNS, step.row, strict=True))
    assert (row["mem_peak_bytes"], row["mem_reserved_bytes"], row["mem_capacity_bytes"]) == (70 * 2**30, 2**36,
                                                                                            96 * 2**30)
    (job,) = rows_for(JobEvent(job="mem", phase="start", world=8, ts_ns=T0, model_shape=SHAPE), T0)
    stored = dict(zip(JOB_COLUMNS, job.row, strict=True))["model_shape"]
    assert orjson.loads(stored) == SHAPE.known() and stored.index('"hidden"') < stored.index('"layers"')
    (plain,) = rows_for(JobEvent(job="mem", phase="start", world=8, ts_ns=T0), T0)
    assert dict(zip(JOB_COLUMNS, plain.row, strict=True))["model_shape"] == ""


@pytest.mark.parametrize(("peak", "reserved", "capacity"), [(None, None, None), (0, 0, 1), (123, None, None),
                                                            (None, 2**63 - 1, 2**40)])
def test_the_shortcut_lands_the_memory_as_the_full_path_does(peak: int | None, reserved: int | None,
                                                             capacity: int | None) -> None:
    event = _step(1, peak, reserved, capacity)
    fast = FAST_ROWS["step"](orjson.loads(encode(event)), T0)
    assert fast is not None and fast == rows_for(event, T0)


@pytest.mark.clickhouse
def test_memory_and_shape_land_and_read_back(backend: Backend) -> None:
    migrate(backend)
    events = [_step(s, None if s == 0 else 1_000 * s, None if s == 0 else 10_000, None if s == 0 else 2**36)
              for s in range(4)]
    for i, event in enumerate(events):  # half through landing's shortcut, half through the full path
        doc = orjson.loads(encode(event))
        _insert(backend, (FAST_ROWS["step"](doc, T0 + i) if i % 2 else None) or rows_for(event, T0 + i))
    _insert(backend, rows_for(JobEvent(job="mem", phase="start", world=8, ts_ns=T0, model_shape=SHAPE), T0))
    db = f"`{backend.database}`"
    got = backend.query(f"SELECT step, mem_peak_bytes, mem_reserved_bytes, mem_capacity_bytes FROM {db}.steps FINAL "
                        "ORDER BY step")
    assert [tuple(r) for r in got] == [(0, None, None, None), (1, 1_000, 10_000, 2**36), (2, 2_000, 10_000, 2**36),
                                       (3, 3_000, 10_000, 2**36)]
    ((shape,),) = backend.query(f"SELECT model_shape FROM {db}.jobs FINAL")
    assert ModelShape(**orjson.loads(shape)) == SHAPE


def _m0017() -> Migration:
    (found,) = [m for m in MIGRATIONS if m.id == "0017_memory"]
    return found


@pytest.mark.clickhouse
def test_0017_applies_again_after_a_crash_before_it_was_recorded(backend: Backend) -> None:
    """The runner skips each column an earlier run already added (one ALTER per column)."""
    migrate(backend)
    again = Migration("9999_again", "0017 re-run", _m0017().statements)
    assert migrate(backend, (*MIGRATIONS, again)) == ["9999_again"]
    _insert(backend, rows_for(_step(5, 42, 43), T0))
    assert backend.query(f"SELECT mem_peak_bytes, mem_reserved_bytes FROM `{backend.database}`.steps") == [(42, 43)]
