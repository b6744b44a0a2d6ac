"""Apply the missing migrations, recording each in `schema_migrations`.

ClickHouse has no transactions, so a migration is made safe to repeat instead: its
statements use IF NOT EXISTS (an ALTER that adds a column, which 18.16 cannot spell with IF
NOT EXISTS, is skipped when the column is already there), and it is recorded only after all
of them succeeded. A crash
in between leaves it unrecorded and the next run re-applies it harmlessly.

Run migrations from one process at a time (the sink worker on start-up): two runners
racing could both apply a migration, which IF NOT EXISTS tolerates, and both record it,
which the ReplacingMergeTree record table collapses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sinks.backend import Backend, qualified
from sinks.features import Features
from sinks.migrations import MIGRATIONS, Migration
from sinks.migrations.ddl import create_table

RECORD_TABLE = "schema_migrations"
RECORD_COLUMNS = ("id", "description", "applied_ns")


def applied_ids(backend: Backend) -> set[str]:
    rows = backend.query(f"SELECT DISTINCT id FROM {qualified(backend.database, RECORD_TABLE)}")
    return {str(row[0]) for row in rows}


def migrate(backend: Backend, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply every migration not yet recorded, in order; return the ids applied (empty: up to date)."""
    ids = [m.id for m in migrations]
    if ids != sorted(ids) or len(set(ids)) != len(ids):
        raise ValueError(f"migration ids must be unique and in order, got {ids}")
    db = backend.database
    backend.execute(
        create_table(
            db,
            RECORD_TABLE,
            [("id", "String"), ("description", "String"), ("applied_ns", "Int64")],
            "ReplacingMergeTree(applied_ns)\nORDER BY id",
        )
    )
    done = applied_ids(backend)
    features = Features.for_version(backend.version())
    applied: list[str] = []
    for migration in migrations:
        if migration.id in done:
            continue
        for statement in migration.statements(db, features):
            try:
                backend.execute(statement)
            except Exception as exc:
                if not _column_already_added(statement, exc):
                    raise
        backend.insert(RECORD_TABLE, RECORD_COLUMNS, [(migration.id, migration.description, time.time_ns())])
        applied.append(migration.id)
    return applied


def _column_already_added(statement: str, exc: Exception) -> bool:
    """A re-run ALTER ... ADD COLUMN whose column a crashed earlier run already added."""
    return statement.startswith("ALTER TABLE") and " ADD COLUMN " in statement and "already exists" in str(exc)
