"""The fleet page's questions (`steplens serve`): what runs now, what is open now, who is slowest now.

Each reads a rollup or the incidents table over a recent window (default the last hour), so the
page stays cheap to refresh every few seconds at any fleet size.
"""

from __future__ import annotations

import statistics
from typing import Any

from steplens.queries.base import FleetQuery, TimeRange, rounded


def jobs_running(time_range: TimeRange) -> FleetQuery:
    """Jobs with a step that ended in the window, most recent first."""
    sql = (
        "SELECT job, max(w) AS world, max(step) AS last_step, count() AS steps, "
        "toDateTime(intDiv(max(e), 1000000000)) AS last_seen, quantileExact(0.5)(t) AS step_p50_ms "
        "FROM (SELECT job, step, maxMerge(world) AS w, maxMerge(end_ns) AS e, maxMerge(max_ms) AS t "
        "FROM {db}.steps_by_step WHERE day >= toDate(toDateTime(%(start_s)s)) GROUP BY job, step, attempt) "
        "WHERE e >= %(start_ns)s AND e < %(end_ns)s GROUP BY job ORDER BY max(e) DESC LIMIT 100"
    )
    return FleetQuery("jobs-running", "dashboard", sql, time_range.params(),
                      ("job", "world", "last_step", "steps", "last_seen", "step_p50_ms"), rounded)


def incidents_open(limit: int = 200) -> FleetQuery:
    """Incidents whose latest state is not `resolved`, newest first."""
    sql = (
        "SELECT toDateTime(intDiv(detected_ns, 1000000000)) AS detected, job, rule, severity, scope, "
        "ifNull(host, '') AS host, ranks, ifNull(step_first, -1) AS step_first, summary, incident_id "
        "FROM {db}.incidents FINAL WHERE state != 'resolved' ORDER BY detected_ns DESC LIMIT %(limit)s"
    )
    return FleetQuery("incidents-open", "dashboard", sql, {"limit": limit},
                      ("detected", "job", "rule", "severity", "scope", "host", "ranks", "step_first", "summary",
                       "incident_id"))


def actions_recent(time_range: TimeRange, limit: int = 50) -> FleetQuery:
    """The mitigation stage's decisions that did or await something (drains, relaunches, undos; dry runs),
    newest first, each with the command that answers it."""
    sql = (
        "SELECT toDateTime(intDiv(at_ns, 1000000000)) AS at, job, level, verdict, ifNull(host, '') AS host, "
        "action_id, by, why, if(verdict = 'dry_run', concat('steplens actions approve ', action_id), "
        "if(verdict = 'act' AND level != 'undo', concat('steplens actions undo ', action_id), '')) AS command "
        "FROM {db}.actions FINAL WHERE verdict IN ('act', 'dry_run') AND at_ns >= %(start_ns)s "
        "AND at_ns < %(end_ns)s ORDER BY at_ns DESC LIMIT %(limit)s"
    )
    return FleetQuery("actions-recent", "dashboard", sql, {**time_range.params(), "limit": limit},
                      ("at", "job", "level", "verdict", "host", "action_id", "by", "why", "command"))


def _against_job_median(key_count: int, limit: int) -> Any:
    """Rows (job, keys..., busy_ms, ...) -> the `limit` highest busy / their job's median busy, with that ratio."""
    def post(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        by_job: dict[str, list[float]] = {}
        for row in rows:
            by_job.setdefault(str(row[0]), []).append(float(row[key_count + 1]))
        medians = {job: statistics.median(values) for job, values in by_job.items()}
        scored = [(*row, float(row[key_count + 1]) / medians[str(row[0])] if medians[str(row[0])] else 0.0)
                  for row in rows]
        scored.sort(key=lambda r: -r[-1])
        return rounded(scored[:limit])
    return post


def slowest_ranks_now(time_range: TimeRange, limit: int = 10) -> FleetQuery:
    """Across jobs: the ranks furthest above their own job's median busy time in the window."""
    sql = (
        "SELECT job, rank, host, sumMerge(busy_ms) / countMerge(rank_steps) AS busy_ms "
        "FROM {db}.steps_by_rank WHERE hour >= toStartOfHour(toDateTime(%(start_s)s)) "
        "GROUP BY job, rank, host"
    )
    return FleetQuery("slowest-ranks-now", "dashboard", sql, time_range.params(),
                      ("job", "rank", "host", "busy_ms", "vs_job_median"), _against_job_median(2, limit))


def slowest_hosts_now(time_range: TimeRange, limit: int = 10) -> FleetQuery:
    """Across jobs: the hosts furthest above their own job's median host in the window."""
    sql = (
        "SELECT job, host, sumMerge(busy_ms) / countMerge(rank_steps) AS busy_ms "
        "FROM {db}.steps_by_rank WHERE hour >= toStartOfHour(toDateTime(%(start_s)s)) GROUP BY job, host"
    )
    return FleetQuery("slowest-hosts-now", "dashboard", sql, time_range.params(),
                      ("job", "host", "busy_ms", "vs_job_median"), _against_job_median(1, limit))


def incident(incident_id: str) -> FleetQuery:
    """One incident's latest state, every field a person reads."""
    sql = (
        "SELECT incident_id, job, rule, state, severity, scope, summary, ifNull(cause, '') AS cause, "
        "ifNull(suggestion, '') AS suggestion, ifNull(host, '') AS host, ranks, ifNull(step_first, -1), "
        "ifNull(step_last, -1), toDateTime(intDiv(detected_ns, 1000000000)) AS detected "
        "FROM {db}.incidents FINAL WHERE incident_id = %(id)s LIMIT 1"
    )
    return FleetQuery("incident", "adhoc", sql, {"id": incident_id},
                      ("incident_id", "job", "rule", "state", "severity", "scope", "summary", "cause", "suggestion",
                       "host", "ranks", "step_first", "step_last", "detected"))
