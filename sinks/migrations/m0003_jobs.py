"""jobs: job lifecycle events (start, end)."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0003_jobs"
DESCRIPTION = "jobs table: one row per (job, phase), the latest ts_ns wins"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("phase", features.dictionary("String")),
        ("world", "UInt32"),
        ("ts_ns", features.timestamp()),
        # parallel: dict[str, int] (domain sizes) as two parallel arrays
        ("parallel_keys", "Array(String)"),
        ("parallel_values", "Array(Int64)"),
        ("last_step", "Nullable(Int64)"),
        ("model", "Nullable(String)"),
        ("event_date", "Date"),
    ]
    # Unpartitioned for the same reason as incidents: a restarted job reuses (job, phase).
    engine = "ReplacingMergeTree(ts_ns)\nORDER BY (job, phase)"
    return [create_table(db, "jobs", columns, engine)]
