"""profile_breakdowns and profile_kernels: what the parse worker extracts from detailed profiles."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0013_profile_breakdowns"
DESCRIPTION = "profile_breakdowns (per rank-step temporal breakdown) and profile_kernels (raw device tasks)"


def statements(db: str, features: Features) -> list[str]:
    breakdowns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("step", "Int64"),
        ("profile_uri", "String"),
        ("format", features.dictionary("String")),
        ("command_id", "Nullable(String)"),
        ("span_us", "Float64"),
        ("compute_us", "Float64"),
        ("communication_us", "Float64"),
        ("overlapped_us", "Float64"),
        ("communication_not_overlapped_us", "Float64"),
        ("memory_not_overlapped_us", "Float64"),
        ("free_us", "Float64"),
        ("preparing_us", "Float64"),
        ("parsed_ns", features.timestamp()),
        ("event_date", "Date"),
    ]
    kernels = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("step", "Int64"),  # -1: launched outside a profiler step
        ("name", "String"),
        ("kind", features.dictionary("String")),
        ("stream", "Int32"),
        ("start_us", "Float64"),  # on the profiler's clock
        ("dur_us", "Float64"),
        ("profile_uri", "String"),
        ("event_date", "Date"),
    ]
    return [
        create_table(db, "profile_breakdowns", breakdowns,
                     "ReplacingMergeTree(parsed_ns)\nPARTITION BY toYYYYMM(event_date)\nORDER BY (job, rank, step)"),
        create_table(db, "profile_kernels", kernels,
                     "MergeTree()\nPARTITION BY toYYYYMM(event_date)\nORDER BY (job, rank, step, start_us)"),
    ]
