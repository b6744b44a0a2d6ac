"""Job attempts (contract 1.4): `attempt` in the replacing keys, so a relaunch's re-run steps
never replace the rows of the attempt before it.

A relaunch from a checkpoint re-sends steps the first attempt already ran, under the same job
id; with (job, step, rank) as the replacing key the second attempt's rows replaced the
first's (6,400 rows left of 12,800 in issue #21's example). The column is appended to the
sort key in the same ALTER that adds it (the only way ClickHouse lets a sort key grow, 18.16
included: the new column may have no default expression, so it is plain UInt16, 0 on every
existing row: the attempt of every 1.3 producer). The per-step rollup is keyed by attempt
too, and its view, recreated, groups by it; the time-keyed rollups (minute, rank-hour, day)
mix no attempts (a relaunch runs after the attempt it replaces) and are unchanged.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import Features
from sinks.migrations.ddl import create_rollup
from sinks.migrations.m0011_rollups import BUSY

ID = "0014_attempts"
DESCRIPTION = "attempt (UInt16, contract 1.4) in the sort keys of steps, kernel_summaries, jobs and steps_by_step"

SORT_KEYS = {  # table -> its sort key before this migration; `attempt` is appended
    "steps": "job, step, rank",
    "kernel_summaries": "job, key, step, rank, entry",
    "jobs": "job, phase",
    "steps_by_step": "job, step",
}
ADD_ATTEMPT = "ADD COLUMN `attempt` UInt16"  # what the runner skips on a re-run where it is already there


def add_attempt(db: str, table: str) -> str:
    return f"ALTER TABLE {qualified(db, table)} {ADD_ATTEMPT}, MODIFY ORDER BY ({SORT_KEYS[table]}, attempt)"


def statements(db: str, features: Features) -> list[str]:
    light_select = (
        "countState() AS rank_steps, sumState(duration_ms) AS device_ms, maxState(duration_ms) AS max_ms, "
        "sumState(toUInt64(ifNull(tokens, 0))) AS tokens, sumState(ifNull(flops, 0.)) AS flops, "
        "sumState(ifNull(peak_flops, 0.) * duration_ms / 1000.) AS peak_flop"
    )
    return [
        *(add_attempt(db, table) for table in SORT_KEYS),
        f"DROP TABLE IF EXISTS {qualified(db, 'steps_by_step_mv')}",
        create_rollup(db, "steps_by_step_mv", "steps_by_step", (
            f"SELECT job, step, attempt, min(event_date) AS day, {light_select}, maxState({BUSY}) AS busy_max, "
            f"avgState({BUSY}) AS busy_mean, minState(start_ns) AS start_ns, "
            f"maxState(end_ns) AS end_ns, maxState(world) AS world\nFROM {qualified(db, 'steps')}\n"
            "GROUP BY job, step, attempt"
        )),
    ]
