"""A ClickHouse server over the native protocol (clickhouse-driver), e.g. Debian's 18.16.

URL form: ``clickhouse://[user[:password]@]host[:port][/database]`` (``clickhouses://`` for
TLS). The port defaults to 9000 (9440 with TLS). The database in the URL path wins over the
one passed in; either way it is created on open when missing (unless ``create_database``
is False: a read-only user may not run DDL). Credentials in the URL win over ``user`` /
``password``; without either the server's ``default`` user is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from clickhouse_driver import Client
from clickhouse_driver import errors as ch_errors

from sinks.backend import (
    BackendBase,
    SinkError,
    check_params,
    check_rows,
    column_list,
    qualified,
    quote_identifier,
)

DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440


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
    ) -> None:
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
        if not create_database:
            return
        try:
            self.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(self.database)}")
        except SinkError:
            self.close()
            raise

    def _run(
        self, action: str, sql: str, params: Any = None, table: str | None = None, settings: Any = None
    ) -> Any:
        if self._client is None:
            raise SinkError(self.name, action, "the backend is closed", table=table)
        try:
            if params is None and settings is None:
                return self._client.execute(sql)
            return self._client.execute(sql, params, settings=settings)
        except (ch_errors.Error, OSError, EOFError) as exc:
            raise SinkError(self.name, action, _error_text(exc), table=table) from exc

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
        sql = f"INSERT INTO {qualified(self.database, table)} ({column_list(columns)}) VALUES"
        merged = dict(settings or {})
        if dedup_token is not None and self.honours_dedup_token():
            merged.update({
                "insert_deduplication_token": dedup_token,
                "deduplicate_blocks_in_dependent_materialized_views": 1,
            })
        self._run("insert", sql, params=[tuple(row) for row in rows], table=table, settings=merged or None)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.disconnect()

    def __repr__(self) -> str:
        return f"<ServerBackend {self.address.display()} database={self.database}>"
