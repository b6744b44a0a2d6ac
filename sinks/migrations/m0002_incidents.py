"""incidents: the latest state of every incident (open -> update -> resolved)."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0002_incidents"
DESCRIPTION = "incidents table: latest state per (job, incident_id), versioned by detected_ns"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("incident_id", "String"),
        ("job", features.dictionary("String")),
        ("rule", features.dictionary("String")),
        ("metric", features.dictionary("Nullable(String)")),
        ("state", features.dictionary("String")),
        ("severity", features.dictionary("String")),
        ("scope", features.dictionary("String")),
        ("summary", "String"),
        ("domain", features.dictionary("Nullable(String)")),
        ("group", "Int32"),  # -1: no group
        ("ranks", "Array(UInt32)"),
        ("host", features.dictionary("Nullable(String)")),
        ("device", "Int32"),  # -1: no device
        ("step_first", "Nullable(Int64)"),
        ("step_last", "Nullable(Int64)"),
        ("observed", "Nullable(Float64)"),
        ("expected", "Nullable(Float64)"),
        ("threshold", "Nullable(Float64)"),
        ("unit", features.dictionary("Nullable(String)")),
        # evidence: dict[str, float] as two parallel arrays (no Map type before 21.x)
        ("evidence_keys", "Array(String)"),
        ("evidence_values", "Array(Float64)"),
        ("cause", "Nullable(String)"),
        ("suggestion", "Nullable(String)"),
        ("detected_ns", features.timestamp()),
        ("event_date", "Date"),
    ]
    # No partition key: an incident's updates carry later detected_ns (possibly in another
    # month) and ReplacingMergeTree only collapses rows within one partition. Incidents are
    # few, so one partition costs nothing.
    engine = "ReplacingMergeTree(detected_ns)\nORDER BY (job, incident_id)"
    return [create_table(db, "incidents", columns, engine)]
