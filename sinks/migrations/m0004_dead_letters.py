"""dead_letters: messages that could not be processed, kept byte-exact for replay."""

from __future__ import annotations

from sinks.features import Features
from sinks.migrations.ddl import create_table

ID = "0004_dead_letters"
DESCRIPTION = "dead_letters table: raw payloads (base64) with the reason they were rejected"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("topic", features.dictionary("String")),
        ("partition", "Int32"),
        ("offset", "Int64"),
        ("key", "String"),  # the key as text when it is UTF-8, '' otherwise
        ("key_b64", "Nullable(String)"),  # base64 of the raw key; null: no key
        ("reason", "String"),
        ("field", "String"),
        ("payload_b64", "String"),  # base64 of the raw message bytes, exactly as received
        ("payload_bytes", "UInt32"),
        ("received_ns", features.timestamp()),
        ("event_date", "Date"),
    ]
    engine = "MergeTree()\nPARTITION BY toYYYYMM(event_date)\nORDER BY (topic, `partition`, `offset`)"
    return [create_table(db, "dead_letters", columns, engine)]
