"""steps: one row per (job, rank, step), the always-on per-step monitor."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0001_steps"
DESCRIPTION = "steps table: one row per (job, rank, step); a replayed step replaces its row"

PHASES = (
    "data_ms", "forward_ms", "backward_ms", "grad_ms",
    "optimizer_ms", "comm_exposed_ms", "interstep_cpu_ms", "gc_ms",
)


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("step", "UInt64"),
        ("world", "UInt32"),
        ("host", features.dictionary("String")),
        ("device", "UInt16"),
        ("dp_group", "Int32"),  # -1: the rank is in no group of this domain
        ("tp_group", "Int32"),
        ("pp_group", "Int32"),
        ("ep_group", "Int32"),
        ("cp_group", "Int32"),
        ("pp_stage", "Int16"),  # the pp domain's index, -1 without pipeline parallelism
        ("start_ns", features.timestamp()),
        ("end_ns", features.timestamp()),
        ("duration_ms", "Float64"),
        *((name, "Nullable(Float64)") for name in PHASES),
        ("gc_count", "Nullable(UInt64)"),
        ("batch_size", "Nullable(UInt64)"),
        ("samples", "Nullable(UInt64)"),
        ("tokens", "Nullable(UInt64)"),
        ("flops", "Nullable(Float64)"),
        ("peak_flops", "Nullable(Float64)"),
        ("profiling", "UInt8"),
        ("event_date", "Date"),
        ("ingested_ns", features.timestamp()),
    ]
    # The partition comes from the step's own start time, so a replayed event lands in the
    # same partition as the original and ReplacingMergeTree (which deduplicates within a
    # partition) keeps only the row with the highest ingested_ns: read with FINAL.
    engine = "ReplacingMergeTree(ingested_ns)\nPARTITION BY toYYYYMM(event_date)\nORDER BY (job, step, rank)"
    return [create_table(db, "steps", columns, engine)]
