"""The fleet questions of the CLI and the capacity report, one function per question.

Dashboard queries read only the materialized-view rollups (sinks/migrations/m0011_rollups);
ad-hoc ones may scan raw rows of one job. All of them are spelled in the SQL subset that
ClickHouse 18.16 and chdb 26.x share (no window functions, no Map, -Merge over -State).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steplens.queries.base import FleetQuery, TimeRange, rounded

ALL_TIME = TimeRange()
_HOURS = "hour >= toStartOfHour(toDateTime(%(start_s)s)) AND hour < toDateTime(%(end_s)s)"
_MINUTES = "minute >= toStartOfMinute(toDateTime(%(start_s)s)) AND minute < toDateTime(%(end_s)s)"


def _post(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return rounded(rows)


def _rank_against_median(limit: int, busy_index: int) -> Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]]:
    """Rows ordered slowest first -> the first `limit`, each with busy / the median of ALL rows.

    The median is taken here over every row (one per rank: 10,240 at most per job) rather
    than in a scalar subquery that would aggregate the rollup a second time.
    """

    def post(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        if not rows:
            return []
        busy = sorted(float(r[busy_index]) for r in rows)
        median = busy[len(busy) // 2] if len(busy) % 2 else (busy[len(busy) // 2 - 1] + busy[len(busy) // 2]) / 2
        return rounded([(*r, float(r[busy_index]) / median if median else 0.0) for r in rows[:limit]])

    return post


def slowest_ranks(job: str, time_range: TimeRange = ALL_TIME, limit: int = 10) -> FleetQuery:
    """Ranks by mean busy time (step − exposed comm: what the others wait for), vs the job's median rank."""
    sql = (
        "SELECT rank, host, countMerge(rank_steps) AS steps, sumMerge(busy_ms) / steps AS busy_ms, "
        "sumMerge(device_ms) / steps AS step_ms, maxMerge(max_ms) AS max_ms "
        f"FROM {{db}}.steps_by_rank WHERE job = %(job)s AND {_HOURS} GROUP BY rank, host "
        "ORDER BY busy_ms DESC, rank"
    )
    return FleetQuery(
        "slowest-ranks", "dashboard", sql, {"job": job, **time_range.params()},
        ("rank", "host", "steps", "busy_ms", "step_ms", "max_ms", "vs_median"), _rank_against_median(limit, 3),
    )


def slowest_hosts(job: str, time_range: TimeRange = ALL_TIME, limit: int = 10) -> FleetQuery:
    """Hosts by the mean busy time of their ranks, vs the job's median host."""
    sql = (
        "SELECT host, uniqExact(rank) AS ranks, countMerge(rank_steps) AS steps, "
        "sumMerge(busy_ms) / steps AS busy_ms, maxMerge(max_ms) AS max_ms "
        f"FROM {{db}}.steps_by_rank WHERE job = %(job)s AND {_HOURS} GROUP BY host ORDER BY busy_ms DESC, host"
    )
    return FleetQuery(
        "slowest-hosts", "dashboard", sql, {"job": job, **time_range.params()},
        ("host", "ranks", "steps", "busy_ms", "max_ms", "vs_median"), _rank_against_median(limit, 3),
    )


def incident_history(
    *, job: str = "", rule: str = "", host: str = "", rank: int = -1,
    time_range: TimeRange = ALL_TIME, limit: int = 100,
) -> FleetQuery:
    """Incidents (latest state each) filtered by any of job, rule, host, rank; newest first."""
    sql = (
        "SELECT toDateTime(intDiv(detected_ns, 1000000000)) AS detected, job, rule, state, severity, scope, "
        "ifNull(host, '') AS host, ranks, ifNull(step_first, -1) AS step_first, ifNull(step_last, -1) AS step_last, "
        "summary, incident_id, ifNull(cause, '') AS cause, ifNull(suggestion, '') AS suggestion "
        "FROM {db}.incidents FINAL "
        "WHERE (%(job)s = '' OR job = %(job)s) AND (%(rule)s = '' OR rule = %(rule)s) "
        "AND (%(host)s = '' OR ifNull(host, '') = %(host)s) "
        "AND (%(rank)s < 0 OR has(ranks, toUInt32(greatest(%(rank)s, 0)))) "
        "AND detected_ns >= %(start_ns)s AND detected_ns < %(end_ns)s "
        "ORDER BY detected_ns DESC LIMIT %(limit)s"
    )
    params = {"job": job, "rule": rule, "host": host, "rank": rank, "limit": limit, **time_range.params()}
    columns = ("detected", "job", "rule", "state", "severity", "scope", "host", "ranks", "step_first",
               "step_last", "summary", "incident_id", "cause", "suggestion")
    return FleetQuery("incidents", "dashboard", sql, params, columns, _post)


def action_history(*, job: str = "", limit: int = 50) -> FleetQuery:
    """The mitigation stage's decisions and actions (each verdict of each action id), newest first."""
    sql = (
        "SELECT toDateTime(intDiv(at_ns, 1000000000)) AS at, action_id, level, verdict, host, job, by, why, "
        "round(keep_cost_gpu_h, 2) AS keep_gpu_h, round(act_cost_gpu_h, 2) AS act_gpu_h "
        "FROM {db}.actions FINAL WHERE (%(job)s = '' OR job = %(job)s) ORDER BY at_ns DESC LIMIT %(limit)s"
    )
    return FleetQuery("actions", "dashboard", sql, {"job": job, "limit": limit},
                      ("at", "action_id", "level", "verdict", "host", "job", "by", "why", "keep_gpu_h", "act_gpu_h"))


def _per_step(where: str) -> str:
    """One row per (job, step) from the step rollup: the job's step time is its slowest rank's."""
    return (
        "SELECT job, step, maxMerge(max_ms) AS t, sumMerge(tokens) AS tok, sumMerge(flops) AS f, "
        "sumMerge(peak_flop) AS pf, maxMerge(world) AS w, maxMerge(busy_max) AS bmax, "
        "avgMerge(busy_mean) AS bmean, minMerge(start_ns) AS s0 "
        f"FROM {{db}}.steps_by_step WHERE {where} GROUP BY job, step"
    )


def job_performance(job: str, recompute: float = 1.0) -> FleetQuery:
    """Step-time percentiles, tokens/s/p, MFU and HFU (spec §1) of one job.

    tokens/s/p = global tokens per step / step time / devices, global tokens = a rank's
    tokens × DP size (from the job's start event; without it every rank's tokens count).
    MFU = Σ model FLOPs / Σ (peak FLOP/s × step time) over ranks and steps; HFU = MFU ×
    `recompute` (the FLOPs ratio with recomputation: 4/3 for full recompute, 1 without); both in %.
    """
    dp = (
        "(SELECT max(parallel_values[indexOf(parallel_keys, 'dp')]) FROM {db}.jobs WHERE job = %(job)s)"
    )
    sql = (
        "SELECT count() AS steps, quantilesExact(0.5, 0.9, 0.99)(t) AS q, avg(t) AS mean_ms, max(w) AS world, "
        f"sum(tok) / max(w) * if({dp} > 0, {dp}, max(w)) / (sum(t) / 1000.) / max(w) AS tokens_per_s_per_device, "
        "if(sum(pf) > 0, sum(f) / sum(pf), 0.) AS mfu "
        f"FROM ({_per_step('job = %(job)s')})"
    )

    def post(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        out = []
        for steps, q, mean, world, tps, mfu in rows:
            if not steps:
                continue
            # in percent with one decimal, as the report's charts show it: one way to read MFU
            out.append((job, steps, world, q[0], q[1], q[2], mean, tps, round(mfu * 100, 1),
                        round(mfu * recompute * 100, 1)))
        return rounded(out, 4)

    return FleetQuery(
        "job-performance", "dashboard", sql, {"job": job},
        ("job", "steps", "world", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "tokens_per_s_per_device", "mfu_pct",
         "hfu_pct"),
        post,
    )


def device_hours_lost(job: str = "", time_range: TimeRange = ALL_TIME, slow_ratio: float = 1.10) -> FleetQuery:
    """Device-hours lost per job to slow steps and to stragglers.

    slow steps: Σ over steps above `slow_ratio` × the job's median step time of (t − median),
    times the world size (every device waits). stragglers: Σ over steps of (slowest rank's
    busy − the ranks' mean busy) × world: the time a synchronous step waits for its slowest rank.
    (Mean, not median: an avg state merges in microseconds where a quantile state of 10,240
    ranks per step costs ~15 µs per step to finalise; one straggler moves the mean by 1/world.)
    """
    where = "(%(job)s = '' OR job = %(job)s) AND s0 >= %(start_ns)s AND s0 < %(end_ns)s"
    sql = (
        "SELECT job, count() AS steps, max(w) AS world, quantileExact(0.5)(t) AS median_ms, "
        "sum(t * w) / 3.6e6 AS device_hours, "
        "arraySum(arrayMap(x -> if(x > %(ratio)s * median_ms, x - median_ms, 0.), groupArray(t))) * max(w) / 3.6e6 "
        "AS lost_slow_steps_h, "
        "sum(greatest(bmax - bmean, 0.) * w) / 3.6e6 AS lost_stragglers_h "
        f"FROM ({_per_step('1')}) WHERE {where} GROUP BY job ORDER BY lost_slow_steps_h + lost_stragglers_h DESC"
    )
    return FleetQuery(
        "device-hours-lost", "dashboard", sql, {"job": job, "ratio": slow_ratio, **time_range.params()},
        ("job", "steps", "world", "median_ms", "device_hours", "lost_slow_steps_h", "lost_stragglers_h"),
        lambda rows: rounded(rows, 4),
    )


def recurrent_offenders(time_range: TimeRange = ALL_TIME, min_jobs: int = 2, limit: int = 20) -> FleetQuery:
    """Hosts named by incidents in at least `min_jobs` different jobs: candidates to isolate, with evidence.

    A rank-scoped incident without a host is attributed through the topology table.
    """
    sql = (
        "SELECT host, uniqExact(job) AS jobs, count() AS incidents, groupUniqArray(rule) AS rules, "
        "max(if(expected > 0, observed / expected, 0.)) AS worst_ratio, "
        "toDateTime(intDiv(min(detected_ns), 1000000000)) AS first_seen, "
        "toDateTime(intDiv(max(detected_ns), 1000000000)) AS last_seen, "
        "arraySlice(groupUniqArray(incident_id), 1, 3) AS examples "
        "FROM (SELECT i.job AS job, i.rule AS rule, i.observed AS observed, i.expected AS expected, "
        "i.detected_ns AS detected_ns, i.incident_id AS incident_id, "
        "if(ifNull(i.host, '') != '', ifNull(i.host, ''), t.host) AS host "
        "FROM (SELECT job, rule, observed, expected, detected_ns, incident_id, host, "
        "if(length(ranks) > 0, ranks[1], toUInt32(4294967295)) AS rank FROM {db}.incidents FINAL "
        "WHERE detected_ns >= %(start_ns)s AND detected_ns < %(end_ns)s AND rule != 'SLOW_STEP') AS i "
        "LEFT JOIN (SELECT job, rank, argMax(host, seen_ns) AS host FROM {db}.topology GROUP BY job, rank) AS t "
        "ON i.job = t.job AND i.rank = t.rank) "
        "WHERE host != '' GROUP BY host HAVING jobs >= %(min_jobs)s "
        "ORDER BY jobs DESC, incidents DESC, host LIMIT %(limit)s"
    )
    return FleetQuery(
        "recurrent-offenders", "dashboard", sql, {"min_jobs": min_jobs, "limit": limit, **time_range.params()},
        ("host", "jobs", "incidents", "rules", "worst_ratio", "first_seen", "last_seen", "examples"), _post,
    )


def device_health(host: str = "", time_range: TimeRange = ALL_TIME, limit: int = 50) -> FleetQuery:
    """Per host: temperature, power (and its swing), clock down-clocking, from the per-hour rollup.

    downclock_pct = 1 − the host's mean clock / the highest clock seen in the fleet over the
    range (the rated clock's stand-in; the spec checks down-clocking > 5 %);
    power_swing_pct = (max − min) / mean power (unstable power swings ±15 %).
    """
    sql = (
        "SELECT host, uniqMerge(devices) AS devices, countMerge(samples) AS samples, "
        "maxMerge(temp_max) AS temp_max_c, avgMerge(temp_avg) AS temp_avg_c, avgMerge(power_avg) AS power_avg_w, "
        "if(power_avg_w > 0, (maxMerge(power_max) - minMerge(power_min)) / power_avg_w * 100, 0.) AS power_swing_pct, "
        "if(%(fleet_max)s > 0, (1 - avgMerge(freq_avg) / %(fleet_max)s) * 100, 0.) AS downclock_pct, "
        "avgMerge(aicore_avg) AS util_avg_pct "
        f"FROM {{db}}.host_health WHERE (%(host)s = '' OR host = %(host)s) AND {_HOURS} "
        "GROUP BY host ORDER BY temp_max_c DESC, host LIMIT %(limit)s"
    ).replace("%(fleet_max)s", f"(SELECT maxMerge(freq_max) FROM {{db}}.host_health WHERE {_HOURS})")
    return FleetQuery(
        "device-health", "dashboard", sql, {"host": host, "limit": limit, **time_range.params()},
        ("host", "devices", "samples", "temp_max_c", "temp_avg_c", "power_avg_w", "power_swing_pct",
         "downclock_pct", "util_avg_pct"), _post,
    )
