"""A ClickHouse server over the native protocol (clickhouse-driver), e.g. Debian's 18.16.

URL form: ``clickhouse://[user[:password]@]host[:port][/database]`` (``clickhouses://`` for
TLS). The port defaults to 9000 (9440 with TLS). The database in the URL path wins over the
one passed in; either way it is created on open when missing (unless ``create_database``
is False: a read-only user may not run DDL). Credentials in the URL win over ``user`` /
``password``; without either the server's ``default`` user is used.

Arrow blocks (the landing worker's steps and device samples, `insert_arrow`) go column by column:
cast exactly to the table's types, then numpy arrays (clickhouse-driver's ``use_numpy``) where every
column type has one, else a Python list per column; 2.6x less client CPU than a tuple per event on
18.16 (BENCHMARKS.md). Whatever Arrow cannot hold exactly goes as rows.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from clickhouse_driver import Client
from clickhouse_driver import errors as ch_errors

from sinks.backend import (
    TYPE_WRAPPER,
    ArrowColumns,
    BackendBase,
    SinkError,
    arrow_rows,
    check_params,
    check_rows,
    column_list,
    column_types,
    qualified,
    quote_identifier,
)

DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440

# Column types clickhouse-driver writes from numpy arrays (``use_numpy``): fixed-width values as one buffer.
# Not Array (it has no numpy column) nor Nullable(Date) (its null map is not read from None there).
_NUMPY_SCALARS = frozenset(("String", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64",
                            "Float32", "Float64", "Date"))
_LAST_DAY = 65_535  # the last ClickHouse Date (2149-06-06), as days since the epoch


@dataclass(frozen=True, slots=True)
class ServerAddress:
    host: str
    port: int
    user: str
    password: str
    database: str | None
    secure: bool

    @classmethod
    def parse(cls, url: str) -> ServerAddress:
        parts = urlsplit(url)
        if parts.scheme not in ("clickhouse", "clickhouses"):
            raise ValueError(f"ClickHouse URL {url!r}: scheme must be clickhouse:// or clickhouses://")
        if not parts.hostname:
            raise ValueError(f"ClickHouse URL {url!r}: no host")
        if parts.query or parts.fragment:
            raise ValueError(f"ClickHouse URL {url!r}: query parameters are not supported")
        secure = parts.scheme == "clickhouses"
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"ClickHouse URL {url!r}: {exc}") from None
        database = unquote(parts.path.strip("/")) or None
        if database is not None and "/" in database:
            raise ValueError(f"ClickHouse URL {url!r}: the path must be a single database name")
        return cls(
            host=parts.hostname,
            port=port or (DEFAULT_SECURE_PORT if secure else DEFAULT_PORT),
            user=unquote(parts.username) if parts.username else "default",
            password=unquote(parts.password) if parts.password else "",
            database=database,
            secure=secure,
        )

    def display(self) -> str:
        """The address without credentials, for messages and logs."""
        scheme = "clickhouses" if self.secure else "clickhouse"
        return f"{scheme}://{self.host}:{self.port}"


def _error_text(exc: Exception) -> str:
    """The server's own message when there is one (clickhouse-driver appends a stack trace)."""
    if isinstance(exc, ch_errors.ServerException):
        message = str(getattr(exc, "message", "") or exc)
        head = message.split("Stack trace:", 1)[0].strip()  # 18.16 appends the server's stack trace
        return f"Code: {exc.code}. {head}"
    return f"{type(exc).__name__}: {exc}"


def _numpy_type(ch_type: str) -> bool:
    """Whether clickhouse-driver's numpy columns write `ch_type` as the row insert would."""
    match = TYPE_WRAPPER.match(ch_type)
    if match is None:
        return ch_type in _NUMPY_SCALARS
    wrapper, inner = match.groups()
    if wrapper == "LowCardinality":
        return _numpy_type(inner)
    return wrapper == "Nullable" and inner in _NUMPY_SCALARS and inner != "Date"


@dataclass(frozen=True, slots=True)
class _DriverColumns:
    """How one (table, columns) insert takes an Arrow table through clickhouse-driver: its columns cast
    exactly to the table's types, the Date columns among them, and whether numpy columns carry them all."""

    arrow: ArrowColumns
    dates: tuple[int, ...]  # indices of Date columns (numpy writes them as UInt16 days: range checked)
    numpy: bool

    @classmethod
    def of(cls, types: Mapping[str, str], columns: Sequence[str], numpy: bool = True) -> _DriverColumns | None:
        import pyarrow as pa

        arrow = ArrowColumns.of(types, columns)
        if arrow is None:
            return None
        return cls(arrow, tuple(i for i, f in enumerate(arrow.schema) if f.type == pa.date32()),
                   numpy and all(_numpy_type(types[c]) for c in columns))

    def columns(self, data: Any) -> tuple[list[Any], bool] | None:
        """`data`'s columns for a columnar insert, and whether they are numpy arrays; None when a value
        does not fit its column's type exactly (or is a null in a non-Nullable column): insert rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        arrays = self.arrow.cast(data)
        if arrays is None:
            return None  # the row insert refuses it (or takes the column default): its behaviour decides
        if not self.numpy:
            return [array.to_pylist() for array in arrays], False
        for i in self.dates:
            days = pc.min_max(arrays[i].cast(pa.int32()))
            if days["min"].as_py() < 0 or days["max"].as_py() > _LAST_DAY:
                return None  # numpy would wrap the day count; the row insert stores 1970-01-01
        return [_numpy_column(array) for array in arrays], True


def _numpy_column(array: Any) -> Any:
    """An Arrow array as the numpy array clickhouse-driver writes: its own buffer for fixed-width values,
    an object array for strings and for a Nullable column with nulls (None where null: its null map)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not array.null_count or pa.types.is_string(array.type):
        return array.to_numpy(zero_copy_only=False)  # strings: str objects, None where null
    if array.null_count == len(array):
        return np.full(len(array), None, dtype=object)
    values = pc.fill_null(array, 0).to_numpy(zero_copy_only=False).astype(object)
    values[array.is_null().to_numpy(zero_copy_only=False)] = None
    return values


class ServerBackend(BackendBase):
    """`Backend` on a ClickHouse server.

    One clickhouse-driver `Client` (which reconnects by itself after a dropped connection).
    A Client is not safe for concurrent use: give each thread its own backend.
    """

    def __init__(
        self,
        url: str,
        database: str = "steplens",
        *,
        connect_timeout: float = 5.0,
        send_receive_timeout: float = 60.0,
        user: str | None = None,
        password: str | None = None,
        create_database: bool = True,
        numpy: bool = True,
    ) -> None:
        """`numpy=False`: Arrow blocks go as a Python list per column even where numpy arrays could
        (the reference the numpy columns are measured and tested against)."""
        self._timeouts = (connect_timeout, send_receive_timeout)
        self.address = ServerAddress.parse(url)
        if user is not None and not urlsplit(url).username:
            self.address = replace(self.address, user=user, password=password or "")
        self.database = self.address.database or database
        self.name = f"server {self.address.display()}"
        self._client: Any = Client(
            host=self.address.host,
            port=self.address.port,
            user=self.address.user,
            password=self.address.password,
            database="default",
            secure=self.address.secure,
            connect_timeout=connect_timeout,
            send_receive_timeout=send_receive_timeout,
            client_name="steplens",
        )
        self._version: tuple[int, int, int] | None = None
        self._layouts: dict[tuple[str, tuple[str, ...]], _DriverColumns | None] = {}
        self._numpy = numpy
        self.inserts_by_kind: dict[str, int] = {}  # blocks inserted: "rows", "columns" (lists), "numpy"
        if not create_database:
            return
        try:
            self.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(self.database)}")
        except SinkError:
            self.close()
            raise

    def _run(
        self, action: str, sql: str, params: Any = None, table: str | None = None, settings: Any = None,
        columnar: bool = False,
    ) -> Any:
        if self._client is None:
            raise SinkError(self.name, action, "the backend is closed", table=table)
        try:
            if params is None and settings is None:
                return self._client.execute(sql)
            return self._client.execute(sql, params, settings=settings, columnar=columnar)
        except (ch_errors.Error, OSError, EOFError) as exc:
            raise SinkError(self.name, action, _error_text(exc), table=table) from exc
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as exc:
            if action != "insert":
                raise
            # the driver's own encoding of a value it cannot write (None in a String column: AttributeError)
            raise SinkError(self.name, action, f"cannot encode a value: {type(exc).__name__}: {exc}",
                            table=table) from exc

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._run("execute", sql, params=self._params(params))

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        rows = self._run("query", sql, params=self._params(params))
        return [tuple(row) for row in rows]

    def _params(self, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """clickhouse-driver substitutes a dict client-side with its escaping (``%(name)s``)."""
        if params is None:
            return None
        check_params(self.name, params)
        return dict(params)

    def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, dedup_token: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """`settings`: more settings of this one insert (the cluster migrations' record: ``insert_quorum``)."""
        if not rows:
            return
        check_rows(self.name, table, columns, rows)
        self._insert(table, columns, [tuple(row) for row in rows], "rows", dedup_token, settings)

    def insert_arrow(
        self, table: str, columns: Sequence[str], data: Any, *, dedup_token: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        """As `insert`, the rows given as an Arrow table (columns in `columns` order), sent column by column:
        numpy arrays (clickhouse-driver's ``use_numpy``: a fixed-width column is one buffer, no Python
        value per cell) when every column's type has a numpy column, else a list per column (arrays);
        the values cast exactly to the table's types first. Rows as `insert` sends them when Arrow cannot
        hold the block exactly (a value outside its type, a null in a non-Nullable column, a type without
        a mapping here), so those keep the row insert's behaviour."""
        if data.num_rows == 0:
            return
        if data.num_columns != len(columns):
            raise SinkError(self.name, "insert", f"block has {data.num_columns} columns for {len(columns)}",
                            table=table)
        layout = self._layout(table, columns)
        converted = layout.columns(data) if layout is not None else None
        if converted is None:
            self.insert(table, columns, arrow_rows(data), dedup_token=dedup_token, settings=settings)
            return
        values, numpy = converted
        try:
            self._insert(table, columns, values, "numpy" if numpy else "columns", dedup_token, settings)
        except SinkError:
            self._layouts.pop((table, tuple(columns)), None)  # e.g. the table changed: look it up again
            raise

    def _layout(self, table: str, columns: Sequence[str]) -> _DriverColumns | None:
        """The Arrow layout of inserting `columns` into `table` (cached; None: insert rows)."""
        key = (table, tuple(columns))
        if key not in self._layouts:
            types = column_types(self, table)
            if not types:
                return None  # no such table (yet): the row insert says so; look again next time
            self._layouts[key] = _DriverColumns.of(types, columns, self._numpy)
        return self._layouts[key]

    def _insert(self, table: str, columns: Sequence[str], values: list[Any], kind: str, dedup_token: str | None,
                settings: Mapping[str, Any] | None) -> None:
        """One INSERT of `values`: rows (`kind` "rows") or columns ("columns": lists, "numpy": arrays)."""
        sql = f"INSERT INTO {qualified(self.database, table)} ({column_list(columns)}) VALUES"
        merged = dict(settings or {})
        if dedup_token is not None and self.honours_dedup_token():
            merged.update({
                "insert_deduplication_token": dedup_token,
                "deduplicate_blocks_in_dependent_materialized_views": 1,
            })
        if kind == "numpy":
            merged["use_numpy"] = True  # a client setting of this query only: results stay Python values
        self._run("insert", sql, params=values, table=table, settings=merged or None, columnar=kind != "rows")
        self.inserts_by_kind[kind] = self.inserts_by_kind.get(kind, 0) + 1

    def on_node(self, host: str, port: int, send_receive_timeout: float | None = None) -> ServerBackend:
        """A backend on another node of this server's cluster: the same user, database and timeouts
        (`send_receive_timeout` another)."""
        scheme = "clickhouses" if self.address.secure else "clickhouse"
        return ServerBackend(f"{scheme}://{host}:{port}", self.database, connect_timeout=self._timeouts[0],
                             send_receive_timeout=send_receive_timeout or self._timeouts[1], user=self.address.user,
                             password=self.address.password, create_database=False, numpy=self._numpy)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.disconnect()

    def __repr__(self) -> str:
        return f"<ServerBackend {self.address.display()} database={self.database}>"
