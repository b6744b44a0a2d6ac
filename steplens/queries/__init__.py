"""Fleet questions as parameterised SQL: each query module returns data, never draws or prints.

Every query is a `FleetQuery`: SQL with ``%(name)s`` placeholders (filled by the backend's
escaping, never by string building), the parameters, the column names of its result, and
whether it is a dashboard query (reads rollups only: p95 target 200 ms) or ad hoc (may scan
raw rows: 2 s). `run(backend, query)` returns a `Result`.
"""

from __future__ import annotations

from steplens.queries.base import FleetQuery, Result, TimeRange, run
from steplens.queries.fleet import (
    action_history,
    device_health,
    device_hours_lost,
    incident_history,
    job_performance,
    recurrent_offenders,
    slowest_hosts,
    slowest_ranks,
)

__all__ = [
    "FleetQuery", "Result", "TimeRange", "action_history", "device_health", "device_hours_lost", "incident_history",
    "job_performance", "recurrent_offenders", "run", "slowest_hosts", "slowest_ranks",
]
