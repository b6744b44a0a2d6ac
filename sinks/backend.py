"""What a ClickHouse backend must offer, and the one error type the sinks raise.

Two implementations speak the same SQL: `sinks.server.ServerBackend` (a ClickHouse server
over the native protocol) and `sinks.embedded.EmbeddedBackend` (chdb, in process, on disk).
Everything above them (migrations, the batching writer) sees only this Protocol.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self, runtime_checkable

from clickhouse_driver.util.escape import escape_params


class SinkError(Exception):
    """A backend call failed.

    The message names the backend (``server clickhouse://host:port`` or ``embedded /path``),
    what was attempted, the table when there is one, and the backend's own error text.
    """

    def __init__(self, backend: str, action: str, detail: str, table: str | None = None) -> None:
        where = f" on table {table}" if table else ""
        super().__init__(f"{backend}: {action} failed{where}: {detail}")
        self.backend = backend
        self.action = action
        self.table = table
        self.detail = detail


@runtime_checkable
class Backend(Protocol):
    """A ClickHouse database that statements run against.

    `database` is the database the steplens tables live in; the backend creates it on open.
    Table names passed to `insert` are unqualified: the backend qualifies them with `database`.
    Every method raises `SinkError` on failure.
    """

    database: str

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement that returns no rows (DDL, INSERT ... SELECT, OPTIMIZE); `params` as in `query`."""
        ...

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a SELECT; rows as tuples of Python values (Date -> datetime.date, arrays -> lists).

        Values from data or users go in `params`, never in `sql`: write ``%(name)s`` where a
        value belongs (and ``%%`` for a literal percent sign when `params` is given). Values
        may be str, int, finite float, None, datetime.date or a list/tuple of those; both
        backends quote them with clickhouse-driver's escaping, so quotes, backslashes and
        newlines in a job name are data, not SQL.
        """
        ...

    def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, dedup_token: str | None = None
    ) -> None:
        """Insert `rows` (values in `columns` order) into `database.table` as one block.

        `dedup_token` (e.g. ``topic:partition:first-last``) makes a retried insert of the same
        block a no-op on engines that honour ``insert_deduplication_token`` (22.2+, see
        sinks.features); older engines ignore it.
        """
        ...

    def version(self) -> tuple[int, int, int]:
        """The engine's version (major, minor, patch), from ``SELECT version()``."""
        ...

    def close(self) -> None:
        """Release the connection; idempotent."""
        ...


_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """'18.16.1' or '26.9.2.1' -> (major, minor, patch)."""
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(f"cannot read a ClickHouse version from {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


_PARAM_SCALARS = (str, int, float, dt.date)


def check_params(backend: str, params: Mapping[str, Any]) -> None:
    """Refuse parameter values the escaping would not quote (bools, bytes, objects render raw)."""

    def ok(value: Any) -> bool:
        if value is None:
            return True
        if isinstance(value, bool) or not isinstance(value, _PARAM_SCALARS):
            return isinstance(value, (list, tuple)) and all(ok(v) and not isinstance(v, (list, tuple)) for v in value)
        return not (isinstance(value, float) and not math.isfinite(value))

    for name, value in params.items():
        if not ok(value):
            raise SinkError(backend, "query", f"parameter {name!r}: unsupported value of type {type(value).__name__}")


def substitute_params(backend: str, sql: str, params: Mapping[str, Any] | None) -> str:
    """`sql` with ``%(name)s`` replaced by quoted literals, as clickhouse-driver does client-side."""
    if params is None:
        return sql
    check_params(backend, params)
    try:
        return str(sql % escape_params(dict(params), None))
    except (KeyError, ValueError, TypeError) as exc:
        raise SinkError(backend, "query", f"cannot substitute parameters: {type(exc).__name__}: {exc}") from exc


def quote_identifier(name: str) -> str:
    """Back-quote a database, table or column name (`group`, `partition`, `offset` are keywords)."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def qualified(database: str, table: str) -> str:
    return f"{quote_identifier(database)}.{quote_identifier(table)}"


def column_list(columns: Sequence[str]) -> str:
    return ", ".join(quote_identifier(c) for c in columns)


def check_rows(backend: str, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Every row must have one value per column, or the insert would misalign silently."""
    width = len(columns)
    for index, row in enumerate(rows):
        if len(row) != width:
            raise SinkError(
                backend, "insert", f"row {index} has {len(row)} values for {width} columns", table=table
            )


def arrow_rows(data: Any) -> list[tuple[Any, ...]]:
    """An Arrow table's rows as tuples of Python values (dates as datetime.date), columns in order:
    what a backend without an Arrow insert is given."""
    return list(zip(*(column.to_pylist() for column in data.columns), strict=True))


TYPE_WRAPPER = re.compile(r"^(Nullable|LowCardinality|Array)\((.*)\)$")
ARROW_SCALARS = ("String", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64",
                 "Float32", "Float64", "Date")


def arrow_type(ch_type: str) -> tuple[Any, bool] | None:
    """(pyarrow type, nullable) for a ClickHouse column type, or None when it has no exact mapping here."""
    import pyarrow as pa

    match = TYPE_WRAPPER.match(ch_type)
    if match is not None:
        wrapper, inner_type = match.groups()
        inner = arrow_type(inner_type)
        if inner is None:
            return None
        if wrapper == "Array":
            return pa.list_(inner[0]), False
        if wrapper == "Nullable":
            return inner[0], True
        return inner  # LowCardinality: the engine builds the dictionary
    if ch_type not in ARROW_SCALARS:
        return None
    scalar = {"String": pa.string(), "Float32": pa.float32(), "Float64": pa.float64(), "Date": pa.date32()}
    return scalar.get(ch_type) or getattr(pa, ch_type.lower())(), False


class ArrowColumns:
    """One (table, columns) insert's Arrow schema, from the table's column types: each column's exact
    Arrow type and whether it may hold nulls. Both backends' Arrow inserts cast through it; each then
    hands the columns over its own way (an ArrowStream message, numpy columns)."""

    __slots__ = ("nullable", "schema")

    def __init__(self, schema: Any, nullable: Sequence[bool]) -> None:
        self.schema = schema  # pyarrow.Schema
        self.nullable = tuple(nullable)

    @classmethod
    def of(cls, types: Mapping[str, str], columns: Sequence[str]) -> ArrowColumns | None:
        """None when a column is missing or its type has no exact Arrow mapping (insert JSON or rows)."""
        import pyarrow as pa

        mapped = [arrow_type(types[c]) if c in types else None for c in columns]
        if any(m is None for m in mapped):
            return None
        schema = pa.schema([pa.field(c, m[0], nullable=True) for c, m in zip(columns, mapped, strict=True) if m])
        return cls(schema, [m[1] for m in mapped if m])

    def cast(self, data: Any) -> list[Any] | None:
        """An Arrow table's columns (in this schema's order) cast exactly to the table's types; None when a
        value does not fit its type or a non-Nullable column has a null (the caller's fallback decides)."""
        import pyarrow as pa

        try:
            arrays = [column.combine_chunks().cast(f.type) for column, f in zip(data.columns, self.schema, strict=True)]
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        if any(array.null_count and not nullable for array, nullable in zip(arrays, self.nullable, strict=True)):
            return None
        return arrays


def column_types(backend: Backend, table: str) -> dict[str, str]:
    """`table`'s column types by name, as the engine spells them (``Nullable(Float64)``); {} when it is missing."""
    rows = backend.query("SELECT name, type FROM system.columns WHERE database = %(db)s AND table = %(t)s",
                         {"db": backend.database, "t": table})
    return {str(name): str(ch_type) for name, ch_type in rows}


@runtime_checkable
class ArrowInserts(Protocol):
    """A backend that also takes a block as an Arrow table (both backends), without a row per event."""

    def insert_arrow(self, table: str, columns: Sequence[str], data: Any, *, dedup_token: str | None = None) -> None:
        """As `Backend.insert`, the rows as a pyarrow Table whose columns are `columns`, in order."""
        ...


class BackendBase:
    """What both backends share: the cached engine version and use as a context manager."""

    _version: tuple[int, int, int] | None = None

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            ((text,),) = self.query("SELECT version()")
            self._version = parse_version(str(text))
        return self._version

    def honours_dedup_token(self) -> bool:
        """Whether `insert(..., dedup_token=...)` deduplicates on this engine (22.2+)."""
        from sinks.features import Features

        return Features.for_version(self.version()).dedup_token

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
