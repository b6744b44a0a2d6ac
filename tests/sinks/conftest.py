"""Backends for the sink integration tests: the real 18.16 server and chdb on a temp directory.

`backend` runs a test on both. The server test uses a database of its own (dropped at the
end); the embedded one a fresh directory. An embedded backend is always closed at the end:
chdb binds one database path per process (see sinks.embedded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sinks.backend import Backend, quote_identifier
from sinks.embedded import EmbeddedBackend
from sinks.server import ServerBackend


@pytest.fixture
def server_backend(clickhouse_server_url: str, unique_name: str) -> Iterator[ServerBackend]:
    backend = ServerBackend(clickhouse_server_url, f"steplens_{unique_name}")
    try:
        yield backend
    finally:
        backend.close()
        with ServerBackend(clickhouse_server_url, "default") as admin:  # the test may have closed its own
            admin.execute(f"DROP DATABASE IF EXISTS {quote_identifier(backend.database)}")


@pytest.fixture
def embedded_backend(tmp_path: Path) -> Iterator[EmbeddedBackend]:
    backend = EmbeddedBackend(tmp_path / "chdb", "steplens")
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(
    params=[
        pytest.param("server", marks=[pytest.mark.clickhouse, pytest.mark.integration]),
        pytest.param("embedded", marks=[pytest.mark.clickhouse]),
    ]
)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The same test on the ClickHouse 18.16 server and on embedded chdb."""
    fixture = "server_backend" if request.param == "server" else "embedded_backend"
    chosen: Backend = request.getfixturevalue(fixture)
    return chosen
