"""device_samples: whole-run device metrics T1–T7 and clock frequency, one row per device per tick."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0007_device_samples"
DESCRIPTION = "device_samples table: one row per (host, device, ts_ns)"

METRICS = ("power_w", "temp_c", "aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct", "freq_mhz")


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("host", features.dictionary("String")),
        ("device", "UInt16"),
        ("ts_ns", features.timestamp()),
        ("job", features.dictionary("String")),  # '' when the sampler does not know the owner
        ("rank", "Int64"),  # -1: no rank
        ("device_kind", features.dictionary("String")),
        *((name, features.codec("Nullable(Float64)", "Gorilla")) for name in METRICS),
        ("event_date", "Date"),
        ("ingested_ns", features.timestamp()),
    ]
    # ORDER BY (host, device, ts_ns): device health is asked per host over a time range
    # (thermal, power, down-clocking); the same key is the replacing key of a resent sample.
    engine = (
        "ReplacingMergeTree(ingested_ns)\nPARTITION BY toYYYYMM(event_date)\nORDER BY (host, device, ts_ns)"
        + features.ttl_clause("event_date + toIntervalDay(90)")
        + features.dedup_settings()
    )
    return [create_table(db, "device_samples", columns, engine)]
