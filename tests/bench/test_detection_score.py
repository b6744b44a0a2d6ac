"""detection.json from saved runs and alerts: every RESULTS.md key, scored against the ground truth."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.detection.run import rescore, score_records
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun

SCENARIO_KEYS = {"recall", "precision", "localisation", "rule_attribution", "incidents_per_fault", "delay_steps_p50",
                 "delay_steps_p99", "delay_s_p50", "delay_s_p99", "ranks", "seeds", "false_alarms"}


def records() -> list[dict[str, object]]:
    from bench.detection.run import run_record
    host = SimRun(scenario_job("slow_host", steps=60, seed=1, job_id="a"))
    healthy = SimRun(scenario_job("healthy", steps=60, seed=1, job_id="h"))
    for run in (host, healthy):
        while run.next_frame() is not None:
            pass
    return [run_record("slow_host", host), run_record("healthy", healthy)]


def test_score_records_has_every_results_key(tmp_path: Path) -> None:
    recs = records()
    fault = recs[0]["faults"][0]  # type: ignore[index]
    messages = [
        {"incident_id": "x", "job": "a", "rule": "SLOW_HOST", "scope": "host", "host": fault["hosts"][0],
         "step_first": fault["start_step"] + 1, "step_last": fault["start_step"] + 3, "detected_ns": 5,
         "state": "open"},
        {"incident_id": "fa", "job": "h", "rule": "SLOW_STEP", "scope": "job", "step_first": 7, "step_last": 7,
         "detected_ns": 6, "state": "open"},
    ]
    result = score_records(recs, messages)  # type: ignore[arg-type]
    host = result["scenarios"]["slow_host"]
    assert set(host) >= SCENARIO_KEYS and set(result["scenarios"]["healthy"]) >= SCENARIO_KEYS
    assert host["recall"] == host["precision"] == host["localisation"] == host["rule_attribution"] == 1.0
    assert host["delay_steps_p50"] == 3.0 and host["ranks"] == 64 and host["seeds"] == 1
    assert result["scenarios"]["healthy"]["recall"] is None and result["scenarios"]["healthy"]["false_alarms"] == 1
    assert result["healthy_rank_steps"] == 64 * 60
    assert result["false_alarms_per_100k_rank_steps"] == 1e5 / (64 * 60)
    day = result["false_alarms_per_job_day"]
    assert day["observed"] == 10_240 * 86_400 / (64 * 60)
    assert 4.7 * day["observed"] < day["upper_95"] < 4.8 * day["observed"], "one event: Poisson bound 4.74"
    (tmp_path / "runs.json").write_bytes(orjson.dumps(recs))
    (tmp_path / "alerts.jsonl").write_bytes(b"".join(orjson.dumps(m) + b"\n" for m in messages))
    out = tmp_path / "detection.json"
    assert rescore(tmp_path, out) == 0
    assert orjson.loads(out.read_bytes())["scenarios"]["slow_host"]["recall"] == 1.0


def test_poisson_bound_is_the_rule_of_three_at_zero_and_grows_with_k() -> None:
    from steplens.scoring import poisson_upper_95
    assert abs(poisson_upper_95(0) - 2.996) < 0.01
    assert abs(poisson_upper_95(5) - 10.51) < 0.01  # chi-square tables: 0.5 x chi2(0.95, 12)

