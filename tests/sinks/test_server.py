"""ServerBackend: URL parsing (pure) and behaviour against the real ClickHouse 18.16 server."""

from __future__ import annotations

import socket

import pytest

from sinks.backend import SinkError, quote_identifier
from sinks.server import ServerAddress, ServerBackend


def test_parse_full_url() -> None:
    a = ServerAddress.parse("clickhouse://alice:p%40ss@db.example:9001/metrics")
    assert (a.host, a.port, a.user, a.password, a.database, a.secure) == (
        "db.example", 9001, "alice", "p@ss", "metrics", False,
    )
    assert a.display() == "clickhouse://db.example:9001"  # no credentials in messages


def test_parse_defaults() -> None:
    a = ServerAddress.parse("clickhouse://127.0.0.1")
    assert (a.port, a.user, a.password, a.database) == (9000, "default", "", None)
    assert ServerAddress.parse("clickhouses://h/").port == 9440


@pytest.mark.parametrize(
    "url", ["http://h:8123", "clickhouse://", "clickhouse://h:notaport", "clickhouse://h/a/b", "clickhouse://h?x=1"]
)
def test_parse_rejects(url: str) -> None:
    with pytest.raises(ValueError, match="ClickHouse URL"):
        ServerAddress.parse(url)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_unreachable_server_is_a_clear_sink_error() -> None:
    port = _closed_port()
    with pytest.raises(SinkError) as info:
        ServerBackend(f"clickhouse://127.0.0.1:{port}", "x", connect_timeout=2.0)
    message = str(info.value)
    assert message.startswith(f"server clickhouse://127.0.0.1:{port}: execute failed")
    assert "Connection refused" in message or "NetworkError" in message


@pytest.mark.integration
@pytest.mark.clickhouse
def test_database_is_created_and_url_path_wins(clickhouse_server_url: str, unique_name: str) -> None:
    name = f"steplens_{unique_name}"
    try:
        with ServerBackend(f"{clickhouse_server_url}/{name}", "ignored") as backend:
            assert backend.database == name
            assert backend.query(f"SELECT name FROM system.databases WHERE name = '{name}'") == [(name,)]
            assert backend.version() == (18, 16, 1)
        # opening again when it already exists is fine
        with ServerBackend(clickhouse_server_url, name) as again:
            assert again.database == name
    finally:
        with ServerBackend(clickhouse_server_url, "default") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {quote_identifier(name)}")


@pytest.mark.integration
@pytest.mark.clickhouse
def test_server_error_text_has_code_and_message_without_stack_trace(server_backend: ServerBackend) -> None:
    with pytest.raises(SinkError) as info:
        server_backend.query("SELECT no_such_column")
    message = str(info.value)
    assert "Code: 47." in message and "no_such_column" in message
    assert "Stack trace" not in message


@pytest.mark.integration
@pytest.mark.clickhouse
def test_keyword_column_names_survive_detach_and_attach(server_backend: ServerBackend) -> None:
    """18.16 writes `group`/`partition`/`offset` unquoted into its metadata; it must still load it."""
    from sinks.migrations.runner import migrate

    migrate(server_backend)
    db = quote_identifier(server_backend.database)
    for table in ("incidents", "dead_letters"):
        server_backend.execute(f"DETACH TABLE {db}.{table}")
        server_backend.execute(f"ATTACH TABLE {db}.{table}")
        assert server_backend.query(f"SELECT count() FROM {db}.{table}") == [(0,)]
