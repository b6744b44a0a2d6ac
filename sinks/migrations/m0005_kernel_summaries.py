"""kernel_summaries: the always-on per-rank-step kernel aggregates (contract 1.1), one row per aggregate."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0005_kernel_summaries"
DESCRIPTION = "kernel_summaries table: one row per (job, rank, step, aggregate); replayed rows replace"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("step", "UInt64"),
        ("host", features.dictionary("String")),
        ("device", "UInt16"),
        ("entry", "Int32"),  # position of the aggregate in the summary; -1: a summary without aggregates
        ("entries", "UInt32"),
        ("key", features.dictionary("String")),  # "F2:4096x4096x4096", "allreduce/dp", "h2d"
        ("cat", features.dictionary("String")),
        ("count", "UInt64"),
        ("total_ns", features.codec("Int64", "T64, ZSTD")),
        ("max_ns", "Nullable(Int64)"),
        ("metric", features.dictionary("Nullable(String)")),
        ("shape_keys", "Array(String)"),
        ("shape_values", "Array(Int64)"),
        ("flops", "Nullable(Float64)"),
        ("op", features.dictionary("Nullable(String)")),
        ("domain", features.dictionary("Nullable(String)")),
        ("group_size", "Nullable(UInt32)"),
        ("bytes", "Nullable(Int64)"),
        ("direction", features.dictionary("Nullable(String)")),
        ("launch_mean_us", "Nullable(Float64)"),
        ("launch_mad_us", "Nullable(Float64)"),
        ("other_count", "UInt64"),  # summary-level: repeated on every row, sum over entry <= 0 only
        ("other_ns", "Int64"),
        ("dropped", "UInt64"),
        ("event_date", "Date"),  # the summary has no timestamp of its own: the day it was ingested
        ("ingested_ns", features.timestamp()),
    ]
    # ORDER BY (job, key, step, rank, entry): the fleet questions on summaries are "this
    # kernel kind of this job over steps" (R4 efficiency, R5 bandwidth per collective), so one
    # job's one key is a contiguous range with its steps in order; (rank, entry) complete
    # the replacing key (an aggregate's key is unique within its summary).
    # Monthly partitions by ingestion day bound merges and let TTL drop whole parts.
    engine = (
        "ReplacingMergeTree(ingested_ns)\nPARTITION BY toYYYYMM(event_date)\n"
        "ORDER BY (job, key, step, rank, entry)"
        + features.ttl_clause("event_date + toIntervalDay(180)")
        + features.dedup_settings()
    )
    return [create_table(db, "kernel_summaries", columns, engine)]
