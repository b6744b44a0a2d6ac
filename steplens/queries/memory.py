"""A job's device memory per rank, as its steps' allocator statistics say it (contract 1.5): `steplens memory`.

What an SRE asks of a rank before an out-of-memory: how full is it now, is it growing, and is that what
the model should take. Per rank over the time range, from the raw step rows (the rollups keep no memory):
the newest step's allocated peak and reserved bytes against the device's capacity, the highest peak, and
the peak's growth per step (least squares: covariance over variance, in SQL ClickHouse 18.16 and chdb
share). Where the job's `start` declared its model's shape, the expected peak per rank (seed 004's
formulas for the declared layout, `streams/model/memory.py`) and observed / expected. Ranks fullest first.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from sinks.backend import Backend, qualified
from steplens.queries.base import TimeRange
from streams.model.memory import MemoryEstimate, expected_peak_bytes, from_contract

GIB = float(2**30)
MIB = float(2**20)
ALL_TIME = TimeRange()
COLUMNS = ("rank", "host", "steps", "peak_gib", "reserved_gib", "capacity_gib", "used_pct", "max_peak_gib",
           "growth_mib_per_step", "expected_gib", "vs_expected")
NO_MEMORY = "no step of this job carries device memory statistics (contract 1.5: mem_peak_bytes, ...)"


def expected_memory(backend: Backend, job: str) -> MemoryEstimate | None:
    """The expected peak per rank from the job's newest declared model shape, None when it declared none
    the formulas can use."""
    rows = backend.query(
        f"SELECT model_shape, parallel_keys, parallel_values FROM {qualified(backend.database, 'jobs')} FINAL "
        "WHERE job = %(job)s AND model_shape != '' ORDER BY ts_ns DESC LIMIT 1", {"job": job})
    if not rows:
        return None
    shape, keys, values = rows[0]
    try:
        declared = orjson.loads(shape)
    except orjson.JSONDecodeError:
        return None
    got = from_contract(declared, dict(zip(keys, values, strict=False))) if isinstance(declared, dict) else None
    return expected_peak_bytes(*got) if got is not None else None


def rank_memory(backend: Backend, job: str, time_range: TimeRange = ALL_TIME, limit: int = 20
                ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """(columns, one row per rank that sent memory statistics), the fullest (newest peak / capacity) first."""
    sql = (
        "SELECT rank, any(host) AS host, count() AS steps, argMax(mem_peak_bytes, step) AS peak, "
        "argMax(mem_reserved_bytes, step) AS reserved, max(mem_capacity_bytes) AS capacity, "
        "max(mem_peak_bytes) AS top, covarPop(toFloat64(step), toFloat64(mem_peak_bytes)) AS cov, "
        "varPop(toFloat64(step)) AS var "
        f"FROM {qualified(backend.database, 'steps')} "
        "WHERE job = %(job)s AND mem_peak_bytes IS NOT NULL AND start_ns >= %(start_ns)s AND start_ns < %(end_ns)s "
        "GROUP BY rank"
    )
    rows = backend.query(sql, {"job": job, **time_range.params()})
    estimate = expected_memory(backend, job) if rows else None
    expected = estimate.total if estimate is not None else None
    out: list[tuple[Any, ...]] = []
    for rank, host, steps, peak, reserved, capacity, top, cov, var in rows:
        used = 100.0 * peak / capacity if peak is not None and capacity else None
        growth = cov / var / MIB if var and cov is not None and math.isfinite(cov / var) else 0.0
        out.append((rank, host, steps, _gib(peak), _gib(reserved), _gib(capacity), _round(used, 1), _gib(top),
                    round(growth, 2), _gib(expected), _round(peak / expected if expected and peak else None, 3)))
    out.sort(key=lambda r: (-(r[6] if r[6] is not None else -1.0), -(r[3] or 0.0), r[0]))
    return COLUMNS, out[:limit]


def _gib(value: float | None) -> float | None:
    return None if value is None else round(value / GIB, 2)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
