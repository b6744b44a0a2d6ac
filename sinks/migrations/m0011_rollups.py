"""Rollups fed by materialized views, so dashboards never scan raw rows.

- steps_by_minute (job, minute): throughput, MFU and step-time quantiles over time;
- steps_by_step (job, step): the job's step time (its slowest rank), the median rank, work
  done; slow steps, straggler cost and device-hours lost come from here (one row per step
  instead of one per rank-step: 10,240 times fewer rows);
- steps_by_rank (job, hour, rank): per-rank busy time, for slowest ranks and hosts;
- steps_by_day (day, host, job): fleet-wide, months of history (recurrent offenders);
- host_health (host, hour): device health (thermal, power, down-clocking) per host.

All are AggregatingMergeTree with -State columns (18.16 has no SimpleAggregateFunction):
read them with the matching -Merge function and GROUP BY. Where the engine honours insert
deduplication tokens the rollup tables have the deduplication window too, and inserts set
``deduplicate_blocks_in_dependent_materialized_views`` so a retried block feeds them once.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import Features
from sinks.migrations.ddl import create_rollup, create_table

ID = "0011_rollups"
DESCRIPTION = "rollups: steps per job-minute, per job-step, per rank-hour, per host-day; host health per hour"

# t-digest states stay a few KB whatever the row count (the reservoir `quantiles` keeps 8,192
# samples per state: 64 KB per job-step with 10,240 ranks); 18.16 has them too.
QUANTILES = "quantilesTDigest(0.5, 0.9, 0.99)"
BUSY = "(duration_ms - ifNull(comm_exposed_ms, 0))"  # the rank's own work: what the others wait for
SECOND = "toDateTime(intDiv(start_ns, 1000000000))"


def _agg(name: str, function: str, ch_type: str) -> tuple[str, str]:
    return name, f"AggregateFunction({function}, {ch_type})"


def _engine(order: str, time_column: str, features: Features, ttl_days: int | None = None) -> str:
    """Monthly partitions of `time_column` (merges stay small, TTL drops whole parts)."""
    partition = f"toYYYYMM({time_column})"
    ttl = features.ttl_clause(f"toDate({time_column}) + toIntervalDay({ttl_days})") if ttl_days else ""
    return f"AggregatingMergeTree()\nPARTITION BY {partition}\nORDER BY {order}{ttl}{features.dedup_settings()}"


def statements(db: str, features: Features) -> list[str]:
    steps = qualified(db, "steps")
    device = qualified(db, "device_samples")
    job, host = features.dictionary("String"), features.dictionary("String")
    light = [  # what every step rollup sums; the quantile state only where a distribution is asked for
        ("rank_steps", "AggregateFunction(count)"),
        _agg("device_ms", "sum", "Float64"),
        _agg("max_ms", "max", "Float64"),
        _agg("tokens", "sum", "UInt64"),
        _agg("flops", "sum", "Float64"),
        _agg("peak_flop", "sum", "Float64"),  # Σ peak_flops × duration_s: the MFU denominator
    ]
    work = [*light, _agg("step_ms_q", QUANTILES, "Float64")]
    light_select = (
        "countState() AS rank_steps, sumState(duration_ms) AS device_ms, maxState(duration_ms) AS max_ms, "
        "sumState(toUInt64(ifNull(tokens, 0))) AS tokens, sumState(ifNull(flops, 0.)) AS flops, "
        "sumState(ifNull(peak_flops, 0.) * duration_ms / 1000.) AS peak_flop"
    )
    work_select = f"{light_select}, {QUANTILES.replace('(', 'State(', 1)}(duration_ms) AS step_ms_q"
    out: list[str] = []

    # per job-minute: ORDER BY (job, minute) -> one job's time series is one contiguous range
    out.append(create_table(db, "steps_by_minute", [
        ("job", job), ("minute", "DateTime"), *work,
        _agg("ranks", "uniq", "UInt32"), _agg("step_min", "min", "UInt64"), _agg("step_max", "max", "UInt64"),
    ], _engine("(job, minute)", "minute", features)))
    out.append(create_rollup(db, "steps_by_minute_mv", "steps_by_minute", (
        f"SELECT job, toStartOfMinute({SECOND}) AS minute, {work_select}, uniqState(rank) AS ranks, "
        f"minState(step) AS step_min, maxState(step) AS step_max\nFROM {steps}\nGROUP BY job, minute"
    )))

    # per job-step: ORDER BY (job, step) -> a job's step range; `day` only partitions
    out.append(create_table(db, "steps_by_step", [
        ("job", job), ("step", "UInt64"), ("day", "Date"), *light,
        _agg("busy_max", "max", "Float64"), _agg("busy_mean", "avg", "Float64"),
        _agg("start_ns", "min", "Int64"), _agg("end_ns", "max", "Int64"), _agg("world", "max", "UInt32"),
    ], _engine("(job, step)", "day", features)))
    out.append(create_rollup(db, "steps_by_step_mv", "steps_by_step", (
        f"SELECT job, step, min(event_date) AS day, {light_select}, maxState({BUSY}) AS busy_max, "
        f"avgState({BUSY}) AS busy_mean, minState(start_ns) AS start_ns, "
        f"maxState(end_ns) AS end_ns, maxState(world) AS world\nFROM {steps}\nGROUP BY job, step"
    )))

    # per rank-hour: ORDER BY (job, hour, rank) -> "slowest ranks of a job over a time range"
    # reads the job's hours in range, then ranks; host rides along for "slowest hosts"
    out.append(create_table(db, "steps_by_rank", [
        ("job", job), ("hour", "DateTime"), ("rank", "UInt32"), ("host", host),
        ("rank_steps", "AggregateFunction(count)"),
        _agg("device_ms", "sum", "Float64"), _agg("busy_ms", "sum", "Float64"), _agg("max_ms", "max", "Float64"),
        _agg("comm_ms", "sum", "Float64"),
    ], _engine("(job, hour, rank, host)", "hour", features)))
    out.append(create_rollup(db, "steps_by_rank_mv", "steps_by_rank", (
        f"SELECT job, toStartOfHour({SECOND}) AS hour, rank, host, countState() AS rank_steps, "
        f"sumState(duration_ms) AS device_ms, sumState({BUSY}) AS busy_ms, maxState(duration_ms) AS max_ms, "
        f"sumState(ifNull(comm_exposed_ms, 0.)) AS comm_ms\nFROM {steps}\nGROUP BY job, hour, rank, host"
    )))

    # per day: ORDER BY (day, host, job) -> fleet-wide history by day, then host
    out.append(create_table(db, "steps_by_day", [
        ("day", "Date"), ("host", host), ("job", job), *light,
    ], _engine("(day, host, job)", "day", features, ttl_days=3 * 365)))
    out.append(create_rollup(db, "steps_by_day_mv", "steps_by_day", (
        f"SELECT event_date AS day, host, job, {light_select}\nFROM {steps}\nGROUP BY day, host, job"
    )))

    # host health per hour: ORDER BY (host, hour) -> one host's health over time; a fleet's
    # week is hosts x 168 rows (per-device minutes would be 10,240 x 10,080)
    out.append(create_table(db, "host_health", [
        ("host", host), ("hour", "DateTime"),
        ("samples", "AggregateFunction(count)"), _agg("devices", "uniq", "UInt16"),
        _agg("temp_max", "max", "Float64"), _agg("temp_avg", "avg", "Float64"),
        _agg("power_max", "max", "Float64"), _agg("power_avg", "avg", "Float64"),
        _agg("power_min", "min", "Float64"),
        _agg("freq_min", "min", "Float64"), _agg("freq_max", "max", "Float64"), _agg("freq_avg", "avg", "Float64"),
        _agg("aicore_avg", "avg", "Float64"),
    ], _engine("(host, hour)", "hour", features, ttl_days=365)))
    second = "toDateTime(intDiv(ts_ns, 1000000000))"
    out.append(create_rollup(db, "host_health_mv", "host_health", (
        f"SELECT host, toStartOfHour({second}) AS hour, countState() AS samples, uniqState(device) AS devices, "
        "maxState(ifNull(temp_c, 0.)) AS temp_max, avgState(ifNull(temp_c, 0.)) AS temp_avg, "
        "maxState(ifNull(power_w, 0.)) AS power_max, avgState(ifNull(power_w, 0.)) AS power_avg, "
        "minState(ifNull(power_w, 0.)) AS power_min, "
        "minState(ifNull(freq_mhz, 0.)) AS freq_min, maxState(ifNull(freq_mhz, 0.)) AS freq_max, "
        "avgState(ifNull(freq_mhz, 0.)) AS freq_avg, avgState(ifNull(aicore_pct, 0.)) AS aicore_avg\n"
        f"FROM {device}\nGROUP BY host, hour"
    )))
    return out
