"""Several runs of one plan as one result: a verdict that holds only in some runs is not yet a verdict.

Issue #45 asks `make bench-detection` to hold three times in a row on a clean clone, and the result file to
keep every run's per-scenario figures. The merged `scenarios` are each scenario's worst run (lowest recall,
precision, localisation, rule attribution and forecast lead; incidents per fault farthest from one; the
longest delays), and the false alarms add up over every run's healthy rank-steps; `repeats` keeps each run.
"""

from __future__ import annotations

from typing import Any

from steplens.scoring import JOB_DAY_RANK_STEPS, poisson_upper_95

LOWEST = ("recall", "precision", "localisation", "rule_attribution", "forecast_lead_steps_min",
          "forecast_lead_steps_p50")
HIGHEST = ("delay_steps_p50", "delay_steps_p99", "delay_s_p50", "delay_s_p99")
SUMMED = ("false_alarms", "faults", "incidents", "rank_steps", "attempts", "seeds")
RUN_KEYS = ("started", "git", "duration_s", "false_alarms_per_100k_rank_steps", "healthy_rank_steps",
            "incidents_alerts_topic", "incidents_clickhouse", "fleet_false_alarms", "ground_truth_dir", "machine",
            "false_alarms_per_job_day")


def _pick(values: list[Any], better_low: bool) -> Any:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return max(known) if better_low else min(known)


def _farthest_from_one(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known, key=lambda v: abs(float(v) - 1.0)) if known else None


def worst_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One scenario's worst figures over the runs it appeared in."""
    out = dict(rows[-1])
    for key in LOWEST:
        if any(key in r for r in rows):
            out[key] = _pick([r.get(key) for r in rows], better_low=False)
    for key in HIGHEST:
        if any(key in r for r in rows):
            out[key] = _pick([r.get(key) for r in rows], better_low=True)
    if any("incidents_per_fault" in r for r in rows):
        out["incidents_per_fault"] = _farthest_from_one([r.get("incidents_per_fault") for r in rows])
    for key in SUMMED:
        if any(key in r for r in rows):
            out[key] = sum(int(r.get(key) or 0) for r in rows)
    out["runs"] = len(rows)
    return out


def merge_repeats(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one plan as one result file: worst scenarios, summed false alarms, every run kept."""
    if not results:
        raise ValueError("no runs to merge")
    names = sorted({name for r in results for name in r["scenarios"]})
    scenarios = {name: worst_row([r["scenarios"][name] for r in results if name in r["scenarios"]])
                 for name in names}
    healthy = sum(int(r.get("healthy_rank_steps") or 0) for r in results)
    false_alarms = sum(int(row.get("false_alarms") or 0) for row in scenarios.values()
                       if row.get("layer") == "healthy")
    merged = {k: v for k, v in results[-1].items() if k not in RUN_KEYS and k != "scenarios"}
    merged.update({
        "scenarios": scenarios,
        "started": results[0].get("started"),
        "git": results[-1].get("git"),
        "machine": results[-1].get("machine"),
        "duration_s": round(sum(float(r.get("duration_s") or 0.0) for r in results), 1),
        "healthy_rank_steps": healthy,
        "false_alarms_per_100k_rank_steps": 1e5 * false_alarms / healthy if healthy else 0.0,
        "false_alarms_per_job_day": {
            "observed": JOB_DAY_RANK_STEPS * false_alarms / healthy if healthy else None,
            "upper_95": JOB_DAY_RANK_STEPS * poisson_upper_95(false_alarms) / healthy if healthy else None},
        "fleet_false_alarms": sum(int(r.get("fleet_false_alarms") or 0) for r in results),
        "incidents_alerts_topic": sum(int(r.get("incidents_alerts_topic") or 0) for r in results),
        "incidents_clickhouse": sum(int(r.get("incidents_clickhouse") or 0) for r in results),
        "repeats": [{**{k: r.get(k) for k in RUN_KEYS}, "scenarios": r["scenarios"]} for r in results],
    })
    return merged
