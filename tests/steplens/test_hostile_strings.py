"""The demo's query path and report with hostile job and host strings: still the right rows, still one cell each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import dead_letter, row_for
from steplens.demo import results_from
from steplens.report import md, plain, render_markdown
from tests.sinks.samples import T0, incident, step

HOSTILE_JOB = "evil' OR 1=1 OR job='\n| x | `y` <script>alert(1)</script> \\' --"
HOSTILE_HOST = "host'); DROP TABLE steps; --\r\n| forged | row |"
PLAIN_JOB = "plain-job"
TOPIC = "t.steps"


@pytest.fixture
def landed(tmp_path: Path) -> Any:
    backend = EmbeddedBackend(tmp_path / "chdb", "steplens")
    migrate(backend)
    table_rows = [
        *(row_for(step(job=PLAIN_JOB, rank=r, step=s, world=8), 1) for r in range(4) for s in range(3)),
        *(row_for(step(job=HOSTILE_JOB, host=HOSTILE_HOST, rank=r, step=s, world=8), 1)
          for r in range(2) for s in range(5)),
        row_for(incident(job=HOSTILE_JOB, incident_id="i'1", host=HOSTILE_HOST,
                         summary=f"rank 3 on {HOSTILE_HOST} is slow", cause="a | b\n| c |"), 1),
        row_for(incident(job=PLAIN_JOB, incident_id="i-2", rule="SLOW_STEP"), 1),
        dead_letter(TOPIC, 0, 1, b"k", b"junk", "is not valid JSON", "<payload>", T0),
        dead_letter("t.other", 0, 2, b"k", b"junk", "is not valid JSON", "<payload>", T0),
    ]
    for tr in table_rows:
        backend.insert(tr.table, tr.columns, [tr.row])
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.clickhouse
def test_the_demo_query_selects_each_job_s_own_rows(landed: EmbeddedBackend) -> None:
    hostile = results_from(landed, HOSTILE_JOB, T0, TOPIC)
    assert (hostile["steps_rows"], hostile["ranks"], hostile["last_step"]) == (10, 2, 4)
    assert [i["incident_id"] for i in hostile["incidents"]] == ["i'1"]
    assert hostile["incidents"][0]["summary"] == f"rank 3 on {HOSTILE_HOST} is slow"
    assert hostile["dead_letters"] == 1  # only the given topic's
    plain_job = results_from(landed, PLAIN_JOB, T0, TOPIC)
    assert (plain_job["steps_rows"], plain_job["ranks"], plain_job["last_step"]) == (12, 4, 2)
    assert [i["incident_id"] for i in plain_job["incidents"]] == ["i-2"]
    assert results_from(landed, "' OR 1=1 OR job='", T0, TOPIC)["steps_rows"] == 0


def _report(results: dict[str, Any], job: str) -> dict[str, Any]:
    score = {"truth": [3], "found": [3], "precision": 1.0, "recall": 1.0}
    return {"job": job, "backend": "embedded chdb", "world": 8, "steps": 5, "seed": 1, "results": results,
            "alerts_received": [], "bad_events_sent": 1, "timings_s": {"total_s": 1.0},
            "scores": {"slow_rank": score, "slow_step": {**score, "truth": [1, 2], "found": [1, 2]}}}


def _unescaped_pipes(line: str) -> int:
    count, escaped = 0, False
    for ch in line:
        if ch == "|" and not escaped:
            count += 1
        escaped = ch == "\\" and not escaped
    return count


@pytest.mark.clickhouse
def test_the_report_keeps_hostile_strings_inside_their_cells(landed: EmbeddedBackend) -> None:
    results = results_from(landed, HOSTILE_JOB, T0, TOPIC)
    text = render_markdown(_report(results, HOSTILE_JOB))
    lines = text.splitlines()
    assert lines[0].startswith("# steplens report — job evil")  # the job's newline did not end the heading
    incident_rows = [line for line in lines if line.startswith("| SLOW")]
    assert len(incident_rows) == 1
    assert _unescaped_pipes(incident_rows[0]) == 9  # 8 cells
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert not any(line.startswith("| forged") for line in lines)
    assert "\\|" in incident_rows[0] and "\\n" in incident_rows[0]


def test_md_and_plain_escape_what_forges_lines_or_markup() -> None:
    assert md("a|b") == "a\\|b"
    assert md("x\ny\r") == "x\\ny\\r"
    assert md("`code` *b* [l](u) <i>&") == "\\`code\\` \\*b\\* \\[l\\](u) &lt;i&gt;&amp;"
    assert md(42) == "42"
    assert md("gc_ms _em_") == "gc_ms \\_em\\_"  # only underscores that could start emphasis
    assert plain("line\nALERT forged") == "line\\nALERT forged"


@pytest.mark.clickhouse
def test_the_report_shows_each_attempt_of_a_relaunched_job(tmp_path: Path) -> None:
    from dataclasses import replace

    backend = EmbeddedBackend(tmp_path / "chdb", "steplens")
    try:
        migrate(backend)
        for attempt, (world, steps) in enumerate(((8, range(0, 30)), (6, range(20, 40)))):
            for r in range(world):
                for s in steps:
                    tr = row_for(replace(step(job=PLAIN_JOB, rank=r, step=s, world=world), attempt=attempt), 1)
                    backend.insert(tr.table, tr.columns, [tr.row])
        results = results_from(backend, PLAIN_JOB, T0, TOPIC)
    finally:
        backend.close()
    assert results["attempts"] == [
        {"attempt": 0, "steps_rows": 240, "ranks": 8, "first_step": 0, "last_step": 29},
        {"attempt": 1, "steps_rows": 120, "ranks": 6, "first_step": 20, "last_step": 39}]
    text = render_markdown(_report(results, PLAIN_JOB))
    assert "Relaunched: 2 attempts." in text
    assert "- attempt 1: steps 20–39, 6 ranks, 120 step rows" in text
