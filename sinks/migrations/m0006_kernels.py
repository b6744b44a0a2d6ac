"""kernels: raw kernel records of profiled steps (the `kernels` event), one row per kernel."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0006_kernels"
DESCRIPTION = "kernels table: one row per kernel record of a profiled (job, rank, step)"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("step", "UInt64"),
        ("host", features.dictionary("String")),
        ("device", "UInt16"),
        ("kernel", "UInt32"),  # position in the batch: the replacing key with (job, rank, step)
        ("name", features.dictionary("String")),
        ("cat", features.dictionary("String")),
        ("start_ns", features.timestamp()),
        ("dur_ns", features.codec("Int64", "T64, ZSTD")),
        ("submit_ns", "Nullable(Int64)"),
        ("stream", "Nullable(Int64)"),
        ("metric", features.dictionary("Nullable(String)")),
        ("shape_keys", "Array(String)"),
        ("shape_values", "Array(Int64)"),
        ("flops", "Nullable(Float64)"),
        ("op", features.dictionary("Nullable(String)")),
        ("bytes", "Nullable(Int64)"),
        ("count", "Nullable(Int64)"),
        ("dtype", features.dictionary("Nullable(String)")),
        ("domain", features.dictionary("Nullable(String)")),
        ("group_name", "Nullable(String)"),
        ("group_size", "Nullable(UInt32)"),
        ("direction", features.dictionary("Nullable(String)")),
        ("dropped", "UInt64"),
        ("event_date", "Date"),
        ("ingested_ns", features.timestamp()),
    ]
    # ORDER BY (job, rank, step, kernel): the reader is the timeline export ("ranks 0–15
    # around step 4,000"), a range over rank then step. Raw kernels are the bulkiest data
    # and only useful while an investigation is fresh: 30-day TTL where supported.
    engine = (
        "ReplacingMergeTree(ingested_ns)\nPARTITION BY toYYYYMM(event_date)\nORDER BY (job, rank, step, kernel)"
        + features.ttl_clause("event_date + toIntervalDay(30)")
        + features.dedup_settings()
    )
    return [create_table(db, "kernels", columns, engine)]
