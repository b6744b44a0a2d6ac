"""The scorer's forecast lead: how many steps before a fault's out-of-memory step its first incident came."""

from __future__ import annotations

from typing import Any

from steplens.scoring import RunTruth, latest_incidents, score_run, summarise


def _alert(step_last: int, detected_ns: int, state: str = "open") -> dict[str, Any]:
    return {"incident_id": "OOM:j:device:node-0/3", "job": "j", "rule": "OOM", "rules": ["OOM"], "scope": "device",
            "ranks": [3], "host": "node-0", "step_first": 30, "step_last": step_last, "detected_ns": detected_ns,
            "state": state}


def _leak(oom_step: float | None) -> dict[str, Any]:
    magnitude = {"leak_mb_per_step": 200.0} if oom_step is None else {"leak_mb_per_step": 200.0, "oom_step": oom_step}
    return {"kind": "memory_leak", "scope": "rank", "start_step": 10, "end_step": None, "ranks": [3],
            "hosts": ["node-0"], "rules": ["OOM"], "magnitude": magnitude}


def test_lead_counts_from_the_step_the_incident_opened_at() -> None:
    views = latest_incidents([_alert(34, 1), _alert(90, 2, "update")])
    run = score_run(RunTruth(job="j", faults=[_leak(130.0)], total_steps=120, rank_steps=1920), views)
    assert run.faults[0].lead_steps == 96.0
    out = summarise([run, score_run(RunTruth(job="j", faults=[_leak(120.0)], total_steps=120, rank_steps=1920),
                                    latest_incidents([_alert(60, 1)]))])
    assert out["forecast_lead_steps_min"] == 60.0 and out["forecast_lead_steps_p50"] == 78.0


def test_a_fault_with_no_forecast_step_has_no_lead() -> None:
    run = score_run(RunTruth(job="j", faults=[_leak(None)], total_steps=120, rank_steps=1920),
                    latest_incidents([_alert(34, 1)]))
    assert run.faults[0].lead_steps is None and "forecast_lead_steps_min" not in summarise([run])
