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


@pytest.mark.usefixtures("fleet")
def test_job_latest_is_the_job_that_reported_last(capsys: Capture) -> None:
    """`--job latest` (the README's examples right after `make demo`): job-b's steps run an hour after job-a's."""
    assert main(["ranks", "--job", "latest", "--format", "json"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "--job latest is job-b" in captured.err
    assert orjson.loads(captured.out) == cli(capsys, "ranks", "--job", "job-b")[1]
    assert cli(capsys, "perf", "--job", "latest")[1][0]["job"] == "job-b"
    code, rows = cli(capsys, "incidents", "--job", "latest")
    assert code == EXIT_OK and {r["job"] for r in rows} == {"job-b"}


def test_incident_history_filters(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    _, truth = fleet
    code, rows = cli(capsys, "incidents", "--host", truth.slow_host)
    assert code == EXIT_OK and {r["job"] for r in rows} == set(truth.jobs)
    code, rows = cli(capsys, "incidents", "--rule", "SLOW_STEP")
    assert [r["step_first"] for r in rows] == [truth.slow_steps[0]]
    code, rows = cli(capsys, "incidents", "--rank", str(truth.slow_rank), "--job", "job-a")
    assert [r["incident_id"] for r in rows] == ["a-1"]
    assert rows[0]["cause"] == "slow compute on the device"  # what to do is in the table, not only the alert
    assert rows[0]["suggestion"] == "check the device for down-clocking"
    code, rows = cli(capsys, "incidents", "--job", "no-such-job")
    assert code == EXIT_EMPTY and rows is None  # a message, not an empty table (test_unknown_job_...)


def test_actions_list_shows_the_mitigation_trail(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    code, rows = cli(capsys, "actions", "list")
    assert code == EXIT_OK
    assert [(r["action_id"], r["level"], r["verdict"], r["host"], r["job"]) for r in rows] == [
        ("SLOW_HOST:job-a:h1/drain", "drain", "dry_run", "h1", "job-a")]
    assert rows[0]["why"] == "partition gpu is not enabled for actions" and rows[0]["at"]
    code, rows = cli(capsys, "actions", "list", "--job", "job-b")
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
    assert row["mfu_pct"] == pytest.approx(mfu * 100, abs=0.05)  # percent, one decimal, as the charts show it
    assert row["hfu_pct"] == pytest.approx(mfu * 1.3333 * 100, abs=0.05)


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
    assert main(["health", "--host", "no-such-host"]) == EXIT_EMPTY  # empty: says why, not a bare table
    assert "no device sample from host 'no-such-host'" in capsys.readouterr().err


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


BAD_VALUES = [
    ("ranks", "--job", "job-a", "--since", "yesterday"),
    ("ranks", "--job", "job-a", "--since", "2026-13-45"),
    ("ranks", "--job", "job-a", "--until", "6x"),
    ("ranks", "--job", "job-a", "--limit", "-5"),
    ("ranks", "--job", "job-a", "--limit", "0"),
    ("ranks", "--job", "job-a", "--limit", "ten"),
    ("hosts", "--job", "job-a", "--limit", "-1"),
    ("incidents", "--rank", "-3"),
    ("perf", "--job", "job-a", "--recompute", "-1"),
    ("perf", "--job", "job-a", "--recompute", "nan"),
    ("lost", "--slow-ratio", "0"),
    ("lost", "--slow-ratio", "1"),
    ("offenders", "--min-jobs", "0"),
    ("model", "show", "--version", "0"),
    ("model", "fit", "--min-jobs", "-2"),
]


@pytest.mark.parametrize("argv", BAD_VALUES, ids=lambda a: " ".join(a))
def test_bad_values_are_usage_errors_with_a_message(argv: tuple[str, ...], capsys: Capture) -> None:
    """Checked by the parser, before any backend opens: exit 2 and a line that names the argument."""
    assert main(list(argv)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err


def test_relative_and_iso_times_are_accepted(fleet: tuple[Backend, Truth], capsys: Capture) -> None:
    for since in ("10m", "6h", "2d", "2020-01-01", "2020-01-01T04:00"):
        assert main(["ranks", "--job", "job-a", "--since", since, "--limit", "1"]) in (EXIT_OK, EXIT_EMPTY)
        assert "error" not in capsys.readouterr().err


def test_unknown_job_is_a_message_and_no_artefact(fleet: tuple[Backend, Truth], capsys: Capture,
                                                   tmp_path: Any) -> None:
    for argv in (["ranks", "--job", "nope"], ["hosts", "--job", "nope"], ["perf", "--job", "nope"],
                 ["incidents", "--job", "nope"], ["lost", "--job", "nope"]):
        assert main(argv) == EXIT_EMPTY, argv
        captured = capsys.readouterr()
        assert captured.out == "" and "no job 'nope'" in captured.err and "job-a" in captured.err, argv
    report, trace = tmp_path / "r" / "nope.html", tmp_path / "t" / "nope.json"
    assert main(["report", "--job", "nope", "-o", str(report)]) == EXIT_EMPTY
    assert main(["timeline", "--job", "nope", "--ranks", "0", "--steps", "1", "-o", str(trace)]) == EXIT_EMPTY
    assert not report.exists() and not trace.exists()


def test_timeline_creates_its_folder(fleet: tuple[Backend, Truth], capsys: Capture, tmp_path: Any) -> None:
    out = tmp_path / "no" / "such" / "dir" / "t.json"
    assert main(["timeline", "--job", "job-a", "--ranks", "0-1", "--steps", "0-3", "-o", str(out)]) == EXIT_OK
    assert orjson.loads(out.read_bytes())["traceEvents"]


def test_closed_pipe_is_quiet() -> None:
    """`steplens migrate --print-cluster fleet | head -1`: the reader leaves early; no BrokenPipeError."""
    import subprocess
    import sys

    proc = subprocess.run(f"{sys.executable} -m steplens.cli migrate --print-cluster fleet | head -1",
                          shell=True, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.startswith("CREATE")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_demo_takes_its_own_options(capsys: Capture) -> None:
    """`steplens demo --steps 5` and `steplens demo --help` reach the demo's parser (they were
    'unrecognized arguments' before: only `python -m steplens demo` took them)."""
    assert main(["demo", "--help"]) == EXIT_OK
    assert "--steps" in capsys.readouterr().out
    assert main(["demo", "--", "--help"]) == EXIT_OK
    assert main(["demo", "--steps", "x"]) == EXIT_USAGE
    assert "argument --steps" in capsys.readouterr().err


def test_demo_job_runs_on_todays_clock() -> None:
    import time

    from steplens.demo import build_job

    now = time.time_ns()
    job = build_job("clock", steps=120, seed=7, now_ns=now)
    assert now - 15 * 60 * 10**9 < job.start_ns < job.end_ns() <= now
