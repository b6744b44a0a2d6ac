"""The runner's bookkeeping, against an in-memory backend (the real round trips are in test_roundtrip)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sinks.features import Features
from sinks.migrations import MIGRATIONS, Migration
from sinks.migrations.runner import migrate
from tests.sinks.fakes import FakeBackend


class RecordingBackend(FakeBackend):
    """Answers the runner's `SELECT DISTINCT id` from what it inserted into schema_migrations."""

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        if "system.tables" in sql:  # does the record table exist (created by its first CREATE)
            assert params is not None and params["table"] == "schema_migrations"
            return [(int(any("schema_migrations" in s for s in self.executed)),)]
        assert "schema_migrations" in sql
        return sorted({(row[0],) for row in self.rows("schema_migrations")})

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        assert tuple(columns) == ("id", "description", "applied_ns")
        super().insert(table, columns, rows)


def test_applies_all_then_nothing() -> None:
    backend = RecordingBackend()
    assert migrate(backend) == [m.id for m in MIGRATIONS]
    assert [r[0] for r in backend.rows("schema_migrations")] == [m.id for m in MIGRATIONS]
    executed = len(backend.executed)
    assert migrate(backend) == []
    assert len(backend.executed) == executed  # up to date: nothing runs (a read-only reader can migrate too)


def test_uses_features_of_the_backend_version() -> None:
    backend = RecordingBackend()  # reports 18.16.1
    migrate(backend)
    assert not any("LowCardinality" in sql for sql in backend.executed)


def test_a_failing_migration_is_not_recorded() -> None:
    calls: list[str] = []

    def broken(db: str, features: Features) -> list[str]:
        calls.append(db)
        raise RuntimeError("boom")

    backend = RecordingBackend()
    migrations = [MIGRATIONS[0], Migration("0002_broken", "fails", broken)]
    with pytest.raises(RuntimeError):
        migrate(backend, migrations)
    assert [r[0] for r in backend.rows("schema_migrations")] == [MIGRATIONS[0].id]
    assert migrate(backend, [MIGRATIONS[0]]) == []


def test_rejects_out_of_order_ids() -> None:
    with pytest.raises(ValueError, match="in order"):
        migrate(RecordingBackend(), [MIGRATIONS[1], MIGRATIONS[0]])
