"""control_commands: profiling switches sent back to ranks, for audit and the timeline."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0009_control_commands"
DESCRIPTION = "control_commands table: one row per (job, command_id)"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("command_id", "String"),
        ("job", features.dictionary("String")),
        ("action", features.dictionary("String")),
        ("ranks", "Array(UInt32)"),  # empty: every rank of the job
        ("step_first", "UInt64"),
        ("step_count", "UInt32"),
        ("issued_ns", features.timestamp()),
        ("level", features.dictionary("String")),
        ("reason", "String"),
        ("incident_id", "Nullable(String)"),
        ("event_date", "Date"),
    ]
    # Few rows, read per job (timeline, audit); unpartitioned like incidents.
    engine = "ReplacingMergeTree(issued_ns)\nORDER BY (job, command_id)" + features.dedup_settings()
    return [create_table(db, "control_commands", columns, engine)]
