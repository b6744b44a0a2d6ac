"""profiles: pointers to detailed profiler dumps (the coarse-to-fine loop's output)."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0008_profiles"
DESCRIPTION = "profiles table: one row per (job, rank, step_first, uri)"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("host", features.dictionary("String")),
        ("format", features.dictionary("String")),
        ("uri", "String"),
        ("step_first", "UInt64"),
        ("step_last", "UInt64"),
        ("ts_ns", features.timestamp()),
        ("bytes", "Nullable(Int64)"),
        ("command_id", "Nullable(String)"),
        ("event_date", "Date"),
    ]
    # Few rows; looked up per job and rank ("which dumps cover rank 37?"). Unpartitioned, so
    # a re-announced dump always collapses with the original.
    engine = "ReplacingMergeTree(ts_ns)\nORDER BY (job, rank, step_first, uri)" + features.dedup_settings()
    return [create_table(db, "profiles", columns, engine)]
