"""Query parameters: values from data or users are data on both backends, never SQL."""

from __future__ import annotations

import datetime as dt

import pytest

from sinks.backend import Backend, SinkError, qualified, substitute_params
from sinks.migrations.runner import migrate
from sinks.rows import row_for
from tests.sinks.samples import step

HOSTILE = [
    "' OR 1=1 OR job='",
    "it's",
    "back\\slash",
    "\\'; DROP TABLE steps; --",
    "new\nline\rand\ttab",
    "nul\x00byte",
    "bell\a\vvt\b\f",
    "pipe | and `tick` <b>html</b>",
    "%(job)s %s %%",
    "ünïcödé €😀",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_strings_round_trip_as_parameters(backend: Backend, value: str) -> None:
    assert backend.query("SELECT %(v)s", {"v": value}) == [(value,)]


def test_a_hostile_job_id_selects_only_its_own_rows(backend: Backend) -> None:
    migrate(backend)
    hostile = "' OR 1=1 OR job='"
    table = qualified(backend.database, "steps")
    for job in ("plain-job", hostile):
        tr = row_for(step(job=job), 1)
        backend.insert(tr.table, tr.columns, [tr.row])
    count = f"SELECT count() FROM {table} WHERE job = %(job)s"
    assert backend.query(count, {"job": hostile}) == [(1,)]
    assert backend.query(count, {"job": "plain-job"}) == [(1,)]
    assert backend.query(count, {"job": "nobody"}) == [(0,)]
    backend.execute(f"ALTER TABLE {table} DELETE WHERE job = %(job)s", {"job": "nobody"})  # execute takes them too


def test_other_parameter_types(backend: Backend) -> None:
    got = backend.query("SELECT %(i)s, %(f)s, %(n)s, %(d)s", {"i": -7, "f": 2.5, "n": None, "d": dt.date(2026, 11, 23)})
    assert [tuple(str(v) for v in got[0])] == [("-7", "2.5", "None", "2026-11-23")]


@pytest.mark.parametrize("value", [True, b"bytes", float("nan"), object(), [[1]]])
def test_values_that_would_render_raw_are_refused(value: object) -> None:
    with pytest.raises(SinkError, match="unsupported value"):
        substitute_params("test", "SELECT %(v)s", {"v": value})


def test_without_params_the_sql_is_left_alone() -> None:
    assert substitute_params("test", "SELECT '%'", None) == "SELECT '%'"
    assert substitute_params("test", "SELECT '%%', %(v)s", {"v": "a'b"}) == "SELECT '%', 'a\\'b'"
