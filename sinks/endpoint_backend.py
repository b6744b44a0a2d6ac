"""`Backend` over a land worker's read endpoint (sinks/read_endpoint.py): queries while it lands.

What `open_backend` returns for an embedded store that another process (the land worker) holds
and announces: the same `query` as the embedded backend (JSONCompact, typed back from the column
types), over HTTP with the endpoint's token. Read-only by construction: `execute` and `insert`
raise, and the engine refuses writes on the endpoint's session anyway.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sinks.backend import BackendBase, SinkError, substitute_params
from sinks.embedded import json_compact_rows
from sinks.read_endpoint import READER_USER, endpoint_file


class EndpointBackend(BackendBase):
    def __init__(self, store: Path, url: str, token: str, database: str, pid: int | None = None,
                 timeout_s: float = 60.0) -> None:
        self.database = database
        self.url = url.rstrip("/")
        self.name = f"embedded {store} (read through the land worker{f' pid {pid}' if pid else ''} at {self.url})"
        self._auth = "Basic " + base64.b64encode(f"{READER_USER}:{token}".encode()).decode()
        self._timeout = timeout_s
        self._store = store

    def _post(self, action: str, sql: str, fmt: str) -> bytes:
        query = urllib.parse.urlencode({"default_format": fmt})
        request = urllib.request.Request(f"{self.url}/?{query}", data=sql.encode(), method="POST",
                                         headers={"Authorization": self._auth})
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as resp:
                data: bytes = resp.read()
                return data
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace").strip()
            raise SinkError(self.name, action, detail or str(exc)) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise SinkError(self.name, action, f"the land worker's read endpoint does not answer ({exc}); "
                            f"is it still running? ({endpoint_file(self._store)})") from exc

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return json_compact_rows(self._post("query", substitute_params(self.name, sql, params), "JSONCompact"))

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        raise SinkError(self.name, "execute", "read-only: the store is landed by another process; writes and "
                        "DDL go through it (or stop it first)")

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
               dedup_token: str | None = None) -> None:
        raise SinkError(self.name, "insert", "read-only: the store is landed by another process", table=table)

    def close(self) -> None:
        pass
