"""`make bench-detection --repeat N` keeps every run and, per scenario, its worst run (bench/detection/repeat.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.detection.repeat import merge_repeats
from tests.bench.test_result_keys import REQUIRED, _missing


def _row(recall: float | None, per_fault: float | None, delay: float | None, false_alarms: int = 0,
         layer: str = "network", rank_steps: int = 7680) -> dict[str, Any]:
    return {"recall": recall, "precision": recall, "localisation": recall, "rule_attribution": recall,
            "incidents_per_fault": per_fault, "delay_steps_p50": delay, "delay_steps_p99": delay,
            "delay_s_p50": None, "delay_s_p99": None, "ranks": 64, "seeds": 1, "faults": 0 if recall is None else 1,
            "incidents": 1, "false_alarms": false_alarms, "layer": layer, "rank_steps": rank_steps,
            "attempts": 1}


def _run(scenarios: dict[str, dict[str, Any]], healthy_rank_steps: int, started: str) -> dict[str, Any]:
    return {"scenarios": scenarios, "healthy_rank_steps": healthy_rank_steps, "started": started, "git": "abc",
            "machine": {"cores": 2}, "duration_s": 800.0, "traits": {"collective_wait": True},
            "false_alarms_per_100k_rank_steps": 0.0, "incidents_alerts_topic": 3, "incidents_clickhouse": 3,
            "fleet_false_alarms": 0, "quick": False}


def test_each_scenario_keeps_its_worst_run_and_every_run_is_kept() -> None:
    first = _run({"link": _row(1.0, 1.0, 2.0), "healthy": _row(None, None, None, 0, "healthy", 50_000)}, 50_000,
                 "t0")
    second = _run({"link": _row(0.0, 2.0, 9.0), "healthy": _row(None, None, None, 2, "healthy", 50_000),
                   "hang": _row(1.0, 0.5, 0.0)}, 50_000, "t1")
    merged = merge_repeats([first, second])
    link = merged["scenarios"]["link"]
    assert (link["recall"], link["precision"], link["rule_attribution"]) == (0.0, 0.0, 0.0)
    assert link["incidents_per_fault"] == 2.0 and link["delay_steps_p99"] == 9.0 and link["runs"] == 2
    assert merged["scenarios"]["hang"]["runs"] == 1 and merged["scenarios"]["hang"]["incidents_per_fault"] == 0.5
    # two false alarms in 100,000 healthy rank-steps over both runs, not the last run's 2 in 50,000
    assert merged["healthy_rank_steps"] == 100_000
    assert merged["false_alarms_per_100k_rank_steps"] == pytest.approx(2.0)
    assert merged["false_alarms_per_job_day"]["observed"] > 0
    assert [r["started"] for r in merged["repeats"]] == ["t0", "t1"]
    assert merged["repeats"][0]["scenarios"]["link"]["recall"] == 1.0
    assert merged["started"] == "t0" and merged["duration_s"] == 1600.0


def test_a_merged_file_carries_the_keys_of_the_results_contract() -> None:
    run = _run({"link": _row(1.0, 1.0, 1.0)}, 7680, "t0")
    merged = merge_repeats([run, run, run])
    top, named = REQUIRED["detection.json"]
    assert _missing(merged, top, named) == []


def test_no_runs_is_an_error_not_an_empty_file() -> None:
    with pytest.raises(ValueError, match="no runs"):
        merge_repeats([])
