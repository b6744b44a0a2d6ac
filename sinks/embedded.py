"""chdb: the ClickHouse engine in process, persisting to a directory (the default backend).

API used (chdb 4.4 / chdb-core 26.9): ``chdb.session.Session(path)`` opens a stateful
session on `path` (created when missing; tables and data persist across sessions);
``Session.query(sql, fmt)`` runs one statement; ``Session.send_insert("INSERT INTO t (cols)",
fmt)`` returns a streaming inserter whose ``append(bytes)`` / ``finish()`` load data without it
ever being part of the SQL text. Inserts go columnar, as one Arrow IPC stream
(``ArrowStream``) typed from the table's own column types: chdb reads Arrow columns at 1-3 µs
a row against 4-8 µs for JSON (kernel summaries: 10.6 -> 5.4 µs a row, Python encoding
included). A batch Arrow cannot represent exactly (a value outside its column's type, a null
in a non-Nullable column, a column type without an Arrow mapping) takes the JSON path:
orjson arrays (``JSONCompactEachRow``), as before, with the same errors. Either way quotes,
newlines, NUL bytes and unicode in strings and arrays round-trip unchanged. Results are
read as ``JSONCompact`` with 64-bit integers unquoted and converted back to Python values
from the column types the engine reports (Date -> datetime.date, Nullable -> None, ...).
One difference from the server: a NaN or infinite float reads back as None (JSON has no
such numbers); the event contract only admits finite floats, so stored rows never have them.

Sharing a path, what chdb 4.4 does (checked, not assumed):

- Within one process there is ONE embedded engine, bound to one path. Any number of
  sessions on that same path may be open together; opening a *different* path while any
  session is open raises ("EmbeddedServer already initialized with path ..."). The engine
  shuts down when its last session closes; after that another path may be opened. So close
  a backend before opening one on another directory (tests: one at a time).
- Across processes the path is exclusive: the engine takes a lock on ``<path>/status``, and
  a second process opening the same path fails ("Cannot lock file .../status. Another server
  instance in same directory is already running"). Only one process (the sink worker) may
  own an embedded database; other processes must go through it or use a ClickHouse server.

Threads: chdb 4.4 documents its sessions as internally locked, but a session accepts no
other statement while a streaming insert is open, and the engine is process-global state.
This backend therefore serialises every call on its own lock; in steplens it is owned and
called by one thread (the sink loop), which is the supported use.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import orjson
from clickhouse_driver.util.escape import escape_params

from sinks.backend import (
    TYPE_WRAPPER,
    ArrowColumns,
    BackendBase,
    SinkError,
    arrow_rows,
    check_rows,
    column_list,
    column_types,
    qualified,
    quote_identifier,
    substitute_params,
)

# Query-level settings applied to this session (chdb passes URL parameters of the path to it).
_SESSION_SETTINGS = "output_format_json_quote_64bit_integers=0&output_format_json_quote_denormals=0"

Convert = Callable[[Any], Any]

_RAW = frozenset((bytes, bytearray, memoryview))


def in_use_by_another_process(path: Path) -> bool:
    """True when another process holds the embedded engine's lock on `path` (``<path>/status``).

    A worker that lands into an embedded store checks this before it joins its consumer group: a
    second land (or parse) worker on the same store used to take its share of the partitions and
    then fail every insert ("Cannot lock file .../status") while holding them, stalling their
    landing for as long as it ran. The probe takes and drops the same ``flock`` the engine takes; a
    process that has the store open itself also reads as busy (its engine's lock is another open
    file), so call it before opening the store.
    """
    import fcntl

    status = Path(path) / "status"
    try:
        fd = os.open(status, os.O_RDONLY)
    except FileNotFoundError:
        return False  # never opened: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def held_by_this_process(path: Path) -> bool:
    """True when this process has the engine's lock file open, i.e. its own engine holds the store (more
    sessions on the same path are fine within one process): `in_use_by_another_process` cannot tell this
    process from another, a flock taken through a new descriptor fails either way. Reads /proc (Linux)."""
    status = str((Path(path) / "status").resolve())
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == status:
                return True
        except OSError:
            continue
    return False


class _ArrowStream:
    """One (table, columns) insert as ArrowStream messages, the format chdb reads fastest."""

    def __init__(self, columns: ArrowColumns) -> None:
        import pyarrow as pa

        self.columns = columns
        self.schema = columns.schema
        # "" for a non-text column, "str" for text, "list" for an array of text: checked for raw bytes
        self.text = ["str" if f.type == pa.string() else "list" if f.type == pa.list_(pa.string()) else ""
                     for f in self.schema]

    def encode(self, rows: Sequence[Sequence[Any]]) -> bytes | None:
        """`rows` as one ArrowStream message, or None when Arrow cannot hold them exactly (use JSON)."""
        import pyarrow as pa

        columns = list(zip(*rows, strict=True))
        for values, text in zip(columns, self.text, strict=True):
            if text and _RAW.intersection(map(type, chain.from_iterable(v for v in values if type(v) is list)
                                              if text == "list" else values)):
                return None  # Arrow would take bytes as text: JSON refuses them, with its reason
        try:
            arrays = [pa.array(values, type=f.type) for values, f in zip(columns, self.schema, strict=True)]
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        for array, nullable in zip(arrays, self.columns.nullable, strict=True):
            if array.null_count and not nullable:
                return None  # JSON decides (null as the column default, as ClickHouse does there)
        return self._stream(arrays)

    def encode_table(self, data: Any) -> bytes | None:
        """An Arrow table (columns in this layout's order) as one ArrowStream message, cast to the
        table's column types; None when a value does not fit its type or a non-Nullable column has a null."""
        arrays = self.columns.cast(data)
        return None if arrays is None else self._stream(arrays)

    def _stream(self, arrays: list[Any]) -> bytes:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, self.schema) as writer:
            writer.write_batch(pa.record_batch(arrays, schema=self.schema))
        payload: bytes = sink.getvalue().to_pybytes()
        return payload


def _converter(ch_type: str) -> Convert | None:
    """A function turning one JSONCompact value of `ch_type` into its Python value, or None for identity."""
    match = TYPE_WRAPPER.match(ch_type)
    if match is not None:
        wrapper, inner_type = match.groups()
        inner = _converter(inner_type)
        if inner is None:
            return None
        if wrapper == "Array":
            item = inner
            return lambda value: [item(v) for v in value]
        if wrapper == "Nullable":
            present = inner
            return lambda value: None if value is None else present(value)
        return inner
    if ch_type in ("Date", "Date32"):
        return dt.date.fromisoformat
    if ch_type == "DateTime" or ch_type.startswith("DateTime("):
        return dt.datetime.fromisoformat
    return None


def json_compact_rows(raw: bytes) -> list[tuple[Any, ...]]:
    """A `JSONCompact` result (64-bit integers unquoted) as Python rows, typed from its column types."""
    if not raw:
        return []
    body = orjson.loads(raw)
    converters = [_converter(column["type"]) for column in body["meta"]]
    return [tuple(v if conv is None else conv(v) for conv, v in zip(converters, values, strict=True))
            for values in body["data"]]


class EmbeddedBackend(BackendBase):
    """`Backend` on a chdb database directory (see the module docstring for sharing rules)."""

    def __init__(self, path: Path | str, database: str = "steplens", *, columnar: bool = True,
                 readonly: bool = False) -> None:
        """`columnar=False` inserts every block as JSON (the reference the Arrow path is tested against).
        `readonly`: a session the engine itself keeps from writing (chdb's `readonly=1` per session: no
        INSERT, DDL, SET or file()/url() table function), beside this process's writing session."""
        from chdb import session as chdb_session  # heavy import: only when the embedded backend is used

        self.path = Path(path).expanduser().resolve()
        self.database = database
        self.name = f"embedded {self.path}"
        self._lock = threading.Lock()
        self._version: tuple[int, int, int] | None = None
        self._layouts: dict[tuple[str, tuple[str, ...]], _ArrowStream | None] = {}
        self._columnar = columnar
        self.inserts_by_format: dict[str, int] = {}  # blocks inserted per input format
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            open_session: Callable[[str], Any] = chdb_session.Session  # chdb ships no type hints
            settings = _SESSION_SETTINGS + ("&readonly=1" if readonly else "")
            self._session: Any = open_session(f"{self.path}?{settings}")
        except (RuntimeError, OSError) as exc:
            raise SinkError(self.name, "open", self._open_error(exc)) from exc
        if readonly:
            return
        try:
            self.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(self.database)}")
        except SinkError:
            self.close()
            raise

    def _open_error(self, exc: Exception) -> str:
        text = str(exc).strip() or type(exc).__name__
        status = self.path / "status"
        if "already initialized" in text:
            return f"{text} (this process has a chdb session open on another path: close it first)"
        if status.exists():
            return (
                f"{text} (is another process using {self.path}? chdb locks {status} and allows one process per path)"
            )
        return text

    def _call(self, action: str, sql: str, fmt: str = "CSV", table: str | None = None) -> Any:
        with self._lock:
            if self._session is None:
                raise SinkError(self.name, action, "the backend is closed", table=table)
            try:
                return self._session.query(sql, fmt)
            except RuntimeError as exc:  # chdb.ChdbError is a RuntimeError
                raise SinkError(self.name, action, str(exc).strip(), table=table) from exc

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._call("execute", substitute_params(self.name, sql, params))

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """As `Backend.query`; `params` are quoted client-side exactly as clickhouse-driver quotes them."""
        result = self._call("query", substitute_params(self.name, sql, params), fmt="JSONCompact")
        return json_compact_rows(result.bytes())

    def raw(self, sql: str, fmt: str) -> bytes:
        """One statement's result as the engine writes it in `fmt` (the read endpoint's answer)."""
        data: bytes = self._call("query", sql, fmt=fmt).bytes()
        return data

    def _layout(self, table: str, columns: Sequence[str]) -> _ArrowStream | None:
        """The Arrow layout for inserting `columns` of `table` (cached; None: JSON only)."""
        key = (table, tuple(columns))
        if key not in self._layouts:
            arrow = ArrowColumns.of(column_types(self, table), columns)
            self._layouts[key] = None if arrow is None else _ArrowStream(arrow)
        return self._layouts[key]

    def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, dedup_token: str | None = None
    ) -> None:
        if not rows:
            return
        check_rows(self.name, table, columns, rows)
        layout = self._layout(table, columns) if self._columnar else None
        self._insert(table, columns, len(rows), layout.encode(rows) if layout is not None else None,
                     lambda: rows, dedup_token)

    def insert_arrow(self, table: str, columns: Sequence[str], data: Any, *, dedup_token: str | None = None) -> None:
        """As `insert`, the rows given as an Arrow table (columns in `columns` order): sent as they are,
        cast to the table's types, without a Python value per cell; as rows when Arrow cannot hold them."""
        if data.num_rows == 0:
            return
        layout = self._layout(table, columns) if self._columnar else None
        arrow = layout.encode_table(data) if layout is not None else None
        if arrow is None:
            self.insert(table, columns, arrow_rows(data), dedup_token=dedup_token)
            return
        self._insert(table, columns, data.num_rows, arrow, lambda: arrow_rows(data), dedup_token)

    def _insert(self, table: str, columns: Sequence[str], count: int, arrow: bytes | None,
                rows_of: Callable[[], Sequence[Sequence[Any]]], dedup_token: str | None) -> None:
        """Send `arrow` (ArrowStream), or the rows as JSON when there is none or Arrow fails with a token."""
        sql = f"INSERT INTO {qualified(self.database, table)} ({column_list(columns)})"
        if dedup_token is not None:
            token = escape_params({"t": dedup_token}, None)["t"]
            sql += (
                f" SETTINGS insert_deduplication_token = {token},"
                " deduplicate_blocks_in_dependent_materialized_views = 1"
            )
        if arrow is not None:
            try:
                self._send(sql, "ArrowStream", arrow, table, count, dedup_token)
                return
            except SinkError:
                # e.g. the table changed under the cached layout: look it up again next time. With a
                # token the JSON attempt below cannot double the block (a part that landed is dropped
                # as a duplicate); without one the caller's retry decides.
                self._layouts.pop((table, tuple(columns)), None)
                if dedup_token is None or self._session is None:
                    raise
        rows = rows_of()
        try:
            # JSONCompactEachRow (one JSON array per row, values in `columns` order): ~1 µs a row
            # to encode against ~8 µs for JSONEachRow's per-row dict.
            payload = b"\n".join(map(orjson.dumps, rows))
        except TypeError as exc:
            detail = f"cannot encode a row as JSON ({exc}); values must be str, int, float, None, list or date"
            if "bytes" in str(exc):
                detail += " (base64-encode raw bytes, as dead letters do)"
            raise SinkError(self.name, "insert", detail, table=table) from exc
        self._send(sql, "JSONCompactEachRow", payload, table, len(rows), dedup_token)

    def _send(self, sql: str, fmt: str, payload: bytes, table: str, count: int, dedup_token: str | None) -> None:
        with self._lock:
            if self._session is None:
                raise SinkError(self.name, "insert", "the backend is closed", table=table)
            try:
                # Leaving the block without finish() cancels the insert (no implicit commit).
                with self._session.send_insert(sql, fmt) as inserter:
                    inserter.append(payload)
                    result = inserter.finish()
            except RuntimeError as exc:
                raise SinkError(self.name, "insert", str(exc).strip(), table=table) from exc
        # rows_written also counts what materialized views wrote (rollups), and a block dropped
        # as a duplicate of an earlier token is a success: only a short count is an error.
        written = int(result.rows_written)
        if written < count and dedup_token is None:
            raise SinkError(self.name, "insert", f"wrote {written} of {count} rows", table=table)
        self.inserts_by_format[fmt] = self.inserts_by_format.get(fmt, 0) + 1

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

    def __repr__(self) -> str:
        return f"<EmbeddedBackend {self.path} database={self.database}>"
