"""Read the embedded store while a land worker writes it: a read-only ClickHouse-HTTP endpoint.

Why: chdb lets one process own a store directory (it locks `<path>/status`), and that process
is the land worker. Without this, every `steplens` query, the report and any ClickHouse client
failed with "Cannot lock file" for as long as ingestion ran: fleet history could be read only
after it stopped. The land worker therefore serves reads from its own process, on a session of
its own opened `readonly=1` (the engine refuses INSERT, DDL, SET and the file()/url() table
functions on it, whatever the SQL says), on 127.0.0.1, behind a token.

Protocol: the subset of ClickHouse's HTTP interface that clients use to read: `GET` or `POST /`
with the SQL in the `query` parameter and/or the body, `default_format` (else TabSeparated, as
ClickHouse), the user `steplens_reader` and the token as password (`X-ClickHouse-User` /
`X-ClickHouse-Key` headers, `user` / `password` parameters, or HTTP basic auth); `GET /ping`
answers `Ok.`. Errors answer as ClickHouse does: a non-2xx status and the message as text.

Where clients find it: `<store>.endpoint.json` beside the store directory (url, token, pid;
mode 0600, in the steplens home that is 0700 already), written when it starts and removed
when it stops; `sinks.open_backend` reads it when the store is locked by another process.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import orjson

from sinks.backend import SinkError

log = logging.getLogger(__name__)

READER_USER = "steplens_reader"
DEFAULT_FORMAT = "TabSeparated"
MAX_QUERY_BYTES = 1 << 20


def endpoint_file(store: Path) -> Path:
    """Where the endpoint of the store at `store` is announced."""
    store = Path(store).expanduser().resolve()
    return store.with_name(store.name + ".endpoint.json")


def read_announcement(store: Path) -> dict[str, Any] | None:
    """The announced endpoint of `store` when its process is alive, else None."""
    path = endpoint_file(store)
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or not {"url", "token", "pid"} <= doc.keys():
        return None
    try:
        os.kill(int(doc["pid"]), 0)
    except (OSError, ValueError, TypeError):
        return None  # its process is gone: a stale file
    return doc


def busy_reason(path: Path, wait_s: float = 30.0, should_stop: Callable[[], bool] = lambda: False,
                pause: Callable[[float], object] = time.sleep) -> str | None:
    """Why a land or parse worker must not take the embedded store at `path`, or None once it may.

    Another land worker owns it (it announces a read endpoint, `sinks.read_endpoint`): refuse at once.
    Anything else that holds it (a `steplens` query, the live page or a report opening the store while
    no land worker runs) holds it for one query: wait up to `wait_s` for it to let go, so a worker that
    starts while somebody reads is not turned away (it was, when `steplens serve` polled the store).
    """
    from sinks.embedded import in_use_by_another_process

    deadline = time.monotonic() + wait_s
    while in_use_by_another_process(path):
        doc = read_announcement(path)
        if doc is not None:
            return f"a land worker (pid {doc['pid']}) owns it"
        if time.monotonic() >= deadline or should_stop():
            return f"a process that is not a land worker has held it for over {wait_s:g} s"
        pause(0.1)
    return None


def one_statement(sql: str) -> str | None:
    """`sql` without trailing semicolons when it is one statement, else None. chdb runs every statement
    of a multi-statement string (ClickHouse's HTTP interface refuses them), and a session that failed
    half-way through one hands the first statement's leftover result to the next query."""
    quote = ""
    i, n = 0, len(sql)
    end = -1
    while i < n:
        c = sql[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"`":
            quote = c
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl
            continue
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        elif c == ";":
            end = i if end < 0 else end
        elif not c.isspace() and end >= 0:
            return None  # something after a semicolon: a second statement
        i += 1
    return sql if end < 0 else sql[:end]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("read endpoint: " + format, *args)

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=UTF-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorised(self, params: dict[str, str]) -> bool:
        user = self.headers.get("X-ClickHouse-User") or params.get("user") or ""
        key = self.headers.get("X-ClickHouse-Key") or params.get("password") or ""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                user, _, key = base64.b64decode(auth[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
        return user == READER_USER and hmac.compare_digest(key.encode(), self.server.token.encode())

    def _handle(self, body: bytes) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if url.path == "/ping":
            self._reply(200, b"Ok.\n")
            return
        if url.path not in ("/", ""):
            self._reply(404, b"not found: the read endpoint answers / and /ping\n")
            return
        if not self._authorised(params):
            self._reply(403, f"Code: 516. authentication failed: user {READER_USER} and the token of "
                             f"{endpoint_file(self.server.store)}\n".encode())
            return
        sql = " ".join(part for part in (params.get("query", ""), body.decode("utf-8", "replace")) if part.strip())
        if not sql.strip():
            self._reply(400, b"Code: 62. empty query\n")
            return
        statement = one_statement(sql)
        if statement is None:
            self._reply(400, b"Code: 62. one statement per request (as ClickHouse's HTTP interface)\n")
            return
        sql = statement
        fmt = params.get("default_format") or DEFAULT_FORMAT
        try:
            data = self.server.run(sql, fmt)
        except SinkError as exc:
            status = 403 if "READONLY" in str(exc) or "readonly" in str(exc) else 400
            self._reply(status, (str(exc) + "\n").encode())
            return
        self._reply(200, data, "application/octet-stream" if "Arrow" in fmt or "Parquet" in fmt
                    else "text/plain; charset=UTF-8")

    def do_GET(self) -> None:
        self._handle(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_QUERY_BYTES:
            self._reply(413, b"Code: 62. query too large\n")
            return
        self._handle(self.rfile.read(length) if length else b"")


class _Server(HTTPServer):
    """One thread serves every request in turn on one read-only session (a chdb session is used
    from the thread that opened it; reads are short)."""

    def __init__(self, store: Path, database: str, token: str, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.store = store
        self.database = database
        self.token = token
        self.session: Any = None

    def run(self, sql: str, fmt: str) -> bytes:
        if self.session is None:
            from sinks.embedded import EmbeddedBackend

            self.session = EmbeddedBackend(self.store, self.database, readonly=True)
        try:
            data: bytes = self.session.raw(sql, fmt)
        except SinkError:
            self.session.close()  # a fresh session for the next request: nothing of a failed one carries over
            self.session = None
            raise
        return data


class ReadEndpoint:
    """Serves read-only queries of the embedded store this process owns (module docstring)."""

    def __init__(self, store: Path, database: str, port: int = 0) -> None:
        self.store = Path(store).expanduser().resolve()
        self._server = _Server(self.store, database, secrets.token_urlsafe(24), port)
        self._thread = threading.Thread(target=self._serve, name="steplens-read-endpoint", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token(self) -> str:
        return self._server.token

    def _serve(self) -> None:
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            if self._server.session is not None:
                self._server.session.close()

    def start(self) -> ReadEndpoint:
        self._thread.start()
        path = endpoint_file(self.store)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps({"url": self.url, "token": self.token, "pid": os.getpid(),
                                   "database": self._server.database, "user": READER_USER}))
        tmp.replace(path)
        log.info("embedded store %s readable while landing at %s (user %s, token in %s)", self.store, self.url,
                 READER_USER, path)
        return self

    def stop(self) -> None:
        try:
            doc = orjson.loads(endpoint_file(self.store).read_bytes())
            if doc.get("pid") == os.getpid():
                endpoint_file(self.store).unlink()
        except (OSError, orjson.JSONDecodeError):
            pass
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
