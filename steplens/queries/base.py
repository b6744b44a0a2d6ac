"""The query value type and the one function that runs it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sinks.backend import Backend

Kind = Literal["dashboard", "adhoc"]

FAR_PAST = 0
FAR_FUTURE = 2**62


@dataclass(frozen=True, slots=True)
class TimeRange:
    """[start_ns, end_ns) in epoch nanoseconds; the default covers all history."""

    start_ns: int = FAR_PAST
    end_ns: int = FAR_FUTURE

    @classmethod
    def parse(cls, since: str | None, until: str | None, now: dt.datetime | None = None) -> TimeRange:
        """ISO times ('2026-11-23T04:00') or relative ('90m', '6h', '7d' before now)."""
        now = now or dt.datetime.now(dt.UTC)

        def one(text: str | None, default: int) -> int:
            if not text:
                return default
            unit = text[-1]
            if unit in "smhd" and text[:-1].isdigit():
                seconds = int(text[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
                return int((now - dt.timedelta(seconds=seconds)).timestamp() * 1e9)
            when = dt.datetime.fromisoformat(text)
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
            return int(when.timestamp() * 1e9)

        return cls(one(since, FAR_PAST), one(until, FAR_FUTURE))

    def params(self) -> dict[str, int]:
        """Seconds too, for the DateTime columns of the rollups."""
        return {
            "start_ns": self.start_ns, "end_ns": self.end_ns,
            "start_s": self.start_ns // 1_000_000_000, "end_s": min(self.end_ns // 1_000_000_000, 2**32 - 1),
        }


@dataclass(frozen=True, slots=True)
class FleetQuery:
    name: str
    kind: Kind
    sql: str
    params: dict[str, Any]
    columns: tuple[str, ...]
    post: Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def run(backend: Backend, query: FleetQuery) -> Result:
    """Run `query` with its parameters on `backend` (database substituted as an identifier)."""
    sql = query.sql.replace("{db}", f"`{backend.database}`")
    rows = backend.query(sql, query.params)
    if query.post is not None:
        rows = query.post(rows)
    return Result(query.name, query.columns, rows)


def rounded(rows: Sequence[tuple[Any, ...]], digits: int = 3) -> list[tuple[Any, ...]]:
    return [tuple(round(v, digits) if isinstance(v, float) else v for v in row) for row in rows]
