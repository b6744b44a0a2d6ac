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



def drift_records() -> list[dict[str, object]]:
    """Two drifting fleets as bench.detection.run.plan_drift builds them: a degraded fabric's jobs (phase 0), then
    down-clocked devices' (phase 1), each with one healthy job beside."""
    from bench.detection.run import DRIFT_FLEET, run_record
    from producers.simulator.catalogue import FaultSpec
    from producers.simulator.fleet import FleetJob
    recs = []
    for phase, (kind, magnitude) in enumerate((("fabric_degraded", {"bw_factor": 0.4}),
                                                ("downclock", {"clock_factor": 0.8}))):
        for n in range(4):
            topo = scenario_job("healthy", steps=1).topology
            faults = [FaultSpec(kind=kind, scope="job", start=0, magnitude=magnitude, rules=("BELOW_EXPECTED",),
                                ranks=tuple(range(topo.world)))] if n < 3 else []  # the fourth: healthy beside
            run = SimRun(FleetJob(f"p{phase}-{n}", topo, 20, faults, n))
            while run.next_frame() is not None:
                pass
            rec = run_record("fleet_drift", run)
            rec["fleet"] = f"{DRIFT_FLEET}-{phase}"
            recs.append(rec)
    return recs


def _fleet_incident(iid: str, phase: int, scope: str = "link", link: str | None = "inter") -> dict[str, object]:
    from bench.detection.run import DRIFT_FLEET
    return {"incident_id": iid, "job": f"{DRIFT_FLEET}-{phase}", "rule": "BELOW_EXPECTED", "scope": scope,
            "link": link, "step_first": 1, "step_last": 4, "detected_ns": 9, "state": "open"}


def test_a_drift_is_found_by_one_fleet_incident_and_a_job_incident_is_a_false_alarm() -> None:
    recs = drift_records()
    both = [_fleet_incident("fabric@0", 0), _fleet_incident("devices@1", 1, "device", None)]
    found = score_records(recs, both)  # type: ignore[arg-type]
    row = found["scenarios"]["fleet_drift"]
    assert row["faults"] == 2 and row["recall"] == row["precision"] == row["localisation"] == 1.0
    assert row["incidents_per_fault"] == 1.0 and row["false_alarms"] == 0 and row["delay_steps_p50"] is None
    assert found["fleet_false_alarms"] == 0
    # each job's own BELOW_EXPECTED instead of the fleet's: missed, and six false alarms
    per_job = [{"incident_id": f"j{p}{n}", "job": f"p{p}-{n}", "rule": "BELOW_EXPECTED", "scope": "job",
                "step_first": 15, "step_last": 15, "detected_ns": 9, "state": "open"} for p in (0, 1) for n in range(3)]
    missed = score_records(recs, per_job)["scenarios"]["fleet_drift"]  # type: ignore[arg-type]
    assert missed["recall"] == 0.0 and missed["false_alarms"] == 6
    # a fleet incident naming the wrong link class (or devices for a fabric) is found but not localised; one
    # outside the drift phases is stray
    wrong = score_records(recs, [_fleet_incident("fabric@0", 0, "link", "intra"),  # type: ignore[arg-type]
                                 _fleet_incident("devices@1", 1, "link", "inter"),
                                 {**_fleet_incident("early", 0), "job": "fleet"}])
    assert wrong["scenarios"]["fleet_drift"]["recall"] == 1.0
    assert wrong["scenarios"]["fleet_drift"]["localisation"] == 0.0 and wrong["fleet_false_alarms"] == 1
