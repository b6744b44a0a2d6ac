"""chdb: the ClickHouse engine in process, persisting to a directory (the default backend).

API used (chdb 4.4 / chdb-core 26.9): ``chdb.session.Session(path)`` opens a stateful
session on `path` (created when missing; tables and data persist across sessions);
``Session.query(sql, fmt)`` runs one statement; ``Session.send_insert("INSERT INTO t (cols)",
"JSONCompactEachRow")`` returns a streaming inserter whose ``append(bytes)`` / ``finish()`` load
data without it ever being part of the SQL text. Inserted rows are orjson arrays, so quotes,
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
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from clickhouse_driver.util.escape import escape_params

from sinks.backend import (
    BackendBase,
    SinkError,
    check_rows,
    column_list,
    qualified,
    quote_identifier,
    substitute_params,
)

# Query-level settings applied to this session (chdb passes URL parameters of the path to it).
_SESSION_SETTINGS = "output_format_json_quote_64bit_integers=0&output_format_json_quote_denormals=0"

_WRAPPER = re.compile(r"^(Nullable|LowCardinality|Array)\((.*)\)$")


Convert = Callable[[Any], Any]


def _converter(ch_type: str) -> Convert | None:
    """A function turning one JSONCompact value of `ch_type` into its Python value, or None for identity."""
    match = _WRAPPER.match(ch_type)
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


class EmbeddedBackend(BackendBase):
    """`Backend` on a chdb database directory (see the module docstring for sharing rules)."""

    def __init__(self, path: Path | str, database: str = "steplens") -> None:
        from chdb import session as chdb_session  # heavy import: only when the embedded backend is used

        self.path = Path(path).expanduser().resolve()
        self.database = database
        self.name = f"embedded {self.path}"
        self._lock = threading.Lock()
        self._version: tuple[int, int, int] | None = None
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            open_session: Callable[[str], Any] = chdb_session.Session  # chdb ships no type hints
            self._session: Any = open_session(f"{self.path}?{_SESSION_SETTINGS}")
        except (RuntimeError, OSError) as exc:
            raise SinkError(self.name, "open", self._open_error(exc)) from exc
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
        raw = result.bytes()
        if not raw:
            return []
        body = orjson.loads(raw)
        converters = [_converter(column["type"]) for column in body["meta"]]
        rows: list[tuple[Any, ...]] = []
        for values in body["data"]:
            rows.append(
                tuple(v if conv is None else conv(v) for conv, v in zip(converters, values, strict=True))
            )
        return rows

    def insert(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, dedup_token: str | None = None
    ) -> None:
        if not rows:
            return
        check_rows(self.name, table, columns, rows)
        try:
            # JSONCompactEachRow (one JSON array per row, values in `columns` order): ~1 µs a row
            # to encode against ~8 µs for JSONEachRow's per-row dict, and no slower for chdb to parse.
            payload = b"\n".join(map(orjson.dumps, rows))
        except TypeError as exc:
            detail = f"cannot encode a row as JSON ({exc}); values must be str, int, float, None, list or date"
            if "bytes" in str(exc):
                detail += " (base64-encode raw bytes, as dead letters do)"
            raise SinkError(self.name, "insert", detail, table=table) from exc
        sql = f"INSERT INTO {qualified(self.database, table)} ({column_list(columns)})"
        if dedup_token is not None:
            token = escape_params({"t": dedup_token}, None)["t"]
            sql += (
                f" SETTINGS insert_deduplication_token = {token},"
                " deduplicate_blocks_in_dependent_materialized_views = 1"
            )
        with self._lock:
            if self._session is None:
                raise SinkError(self.name, "insert", "the backend is closed", table=table)
            try:
                # Leaving the block without finish() cancels the insert (no implicit commit).
                with self._session.send_insert(sql, "JSONCompactEachRow") as inserter:
                    inserter.append(payload)
                    result = inserter.finish()
            except RuntimeError as exc:
                raise SinkError(self.name, "insert", str(exc).strip(), table=table) from exc
        # rows_written also counts what materialized views wrote (rollups), and a block dropped
        # as a duplicate of an earlier token is a success: only a short count is an error.
        written = int(result.rows_written)
        if written < len(rows) and dedup_token is None:
            raise SinkError(self.name, "insert", f"wrote {written} of {len(rows)} rows", table=table)

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

    def __repr__(self) -> str:
        return f"<EmbeddedBackend {self.path} database={self.database}>"
