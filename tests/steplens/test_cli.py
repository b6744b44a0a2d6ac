"""The fleet questions through the `steplens` CLI, judged against the test fleet's ground truth."""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np
import orjson
import pytest

from sinks.backend import Backend
from steplens.cli import EXIT_EMPTY, EXIT_OK, EXIT_USAGE, main
from tests.steplens.fleet_data import Truth, step_events

Capture = pytest.CaptureFixture[str]


def cli(capsys: Capture, *argv: str) -> tuple[int, Any]:
    code = main([*argv, "--format", "json"])
    out = capsys.readouterr().out
    return code, orjson.loads(out) if out.strip() else None


def test_slowest_rank_and_host_are_the_straggler(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    _, truth = fleet
    for job in truth.jobs:
        code, ranks = cli(capsys, "ranks", "--job", job, "--limit", "3")
        assert code == EXIT_OK
        assert ranks[0]["rank"] == truth.slow_rank and ranks[0]["vs_median"] > 1.2
        assert all(r["vs_median"] < 1.05 for r in ranks[1:])
        code, hosts = cli(capsys, "hosts", "--job", job)
        assert hosts[0]["host"] == truth.slow_host and len(hosts) == 4


def test_incident_history_filters(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    _, truth = fleet
    code, rows = cli(capsys, "incidents", "--host", truth.slow_host)
    assert code == EXIT_OK and {r["job"] for r in rows} == set(truth.jobs)
    code, rows = cli(capsys, "incidents", "--rule", "SLOW_STEP")
    assert [r["step_first"] for r in rows] == [truth.slow_steps[0]]
    code, rows = cli(capsys, "incidents", "--rank", str(truth.slow_rank), "--job", "job-a")
    assert [r["incident_id"] for r in rows] == ["a-1"]
    code, rows = cli(capsys, "incidents", "--job", "no-such-job")
    assert code == EXIT_EMPTY and rows == []


def test_job_performance_matches_spec_formulas(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    events = step_events("job-a", 0)
    per_step: dict[int, list[Any]] = {}
    for e in events:
        per_step.setdefault(e.step, []).append(e)
    step_ms = np.array([max(e.duration_ms for e in es) for es in per_step.values()])
    dp, world = 4, 16
    tokens = sum(e.tokens or 0 for e in events) / world * dp / world / (step_ms.sum() / 1e3)
    mfu = sum(e.flops or 0 for e in events) / sum((e.peak_flops or 0) * e.duration_ms / 1e3 for e in events)
    code, rows = cli(capsys, "perf", "--job", "job-a", "--recompute", "1.3333")
    assert code == EXIT_OK
    (row,) = rows
    assert row["steps"] == len(per_step)
    assert row["p50_ms"] == pytest.approx(np.median(step_ms), rel=0.02)
    assert row["tokens_per_s_per_device"] == pytest.approx(tokens, rel=0.01)
    assert row["mfu"] == pytest.approx(mfu, abs=1e-3)
    assert row["hfu"] == pytest.approx(mfu * 1.3333, abs=1e-3)


def test_offenders_lost_hours_and_health(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    _, truth = fleet
    code, rows = cli(capsys, "offenders")
    assert code == EXIT_OK and [r["host"] for r in rows] == [truth.slow_host] and rows[0]["jobs"] == 2
    code, rows = cli(capsys, "lost")
    lost = {r["job"]: r for r in rows}
    assert lost["job-a"]["lost_slow_steps_h"] > 0 and lost["job-b"]["lost_slow_steps_h"] == 0
    # job-a's slow steps: 3 steps of (1.6 - 1) x the median step, every rank waiting
    median = lost["job-a"]["median_ms"]
    assert lost["job-a"]["lost_slow_steps_h"] == pytest.approx(3 * 0.6 * median * 16 / 3.6e6, rel=0.05)
    assert all(r["lost_stragglers_h"] > 0 for r in rows)
    code, rows = cli(capsys, "health")
    assert rows[0]["host"] == truth.hot_host and rows[0]["downclock_pct"] > 5
    assert all(r["downclock_pct"] < 5 and r["temp_max_c"] < 85 for r in rows[1:])


def test_formats_and_exit_codes(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    assert main(["ranks", "--job", "job-a", "--format", "csv", "--limit", "2"]) == EXIT_OK
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0][:2] == ["rank", "host"] and len(table) == 3
    assert main(["ranks", "--job", "job-a", "--limit", "2"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["rank", "host"] and len(lines) == 3
    assert main(["ranks"]) == EXIT_USAGE  # --job missing
    assert main(["ranks", "--job", "x", "--format", "xml"]) == EXIT_USAGE
    assert main(["--help"]) == EXIT_OK
    for command in ("ranks", "report", "timeline", "migrate", "up", "worker", "demo"):
        assert main([command, "--help"]) == EXIT_OK
