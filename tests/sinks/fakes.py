"""An in-memory Backend for pure unit tests of code above the backends (not a database)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sinks.backend import SinkError


class FakeBackend:
    """Records inserts; `fail` makes inserts (of `fail_tables`, or all) raise SinkError."""

    def __init__(self, database: str = "fake") -> None:
        self.database = database
        self.inserts: list[tuple[str, tuple[str, ...], list[tuple[Any, ...]]]] = []
        self.executed: list[str] = []
        self.fail = False
        self.fail_tables: set[str] | None = None
        self.closed = False
        self.tokens: list[str | None] = []  # the dedup token of every insert attempt, in order

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self.executed.append(sql)

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return []

    def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, dedup_token: str | None = None
    ) -> None:
        self.tokens.append(dedup_token)
        if self.fail and (self.fail_tables is None or table in self.fail_tables):
            raise SinkError("fake", "insert", "server is down", table=table)
        self.inserts.append((table, tuple(columns), [tuple(r) for r in rows]))

    def version(self) -> tuple[int, int, int]:
        return (18, 16, 1)

    def close(self) -> None:
        self.closed = True

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        return [row for t, _, rows in self.inserts if t == table for row in rows]
