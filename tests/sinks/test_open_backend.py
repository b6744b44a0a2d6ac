"""open_backend picks the server when a URL is configured, chdb otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.settings import Settings
from sinks import open_backend
from sinks.backend import Backend, quote_identifier
from sinks.embedded import EmbeddedBackend
from sinks.server import ServerBackend


@pytest.mark.clickhouse
def test_default_is_embedded_at_the_configured_path(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, clickhouse_database="sl_embedded")
    backend = open_backend(settings)
    try:
        assert isinstance(backend, EmbeddedBackend) and isinstance(backend, Backend)
        assert backend.path == (tmp_path / "chdb").resolve()
        assert backend.database == "sl_embedded"
        assert backend.query("SELECT name FROM system.databases WHERE name = 'sl_embedded'") == [("sl_embedded",)]
    finally:
        backend.close()


@pytest.mark.integration
@pytest.mark.clickhouse
def test_url_selects_the_server(clickhouse_server_url: str, unique_name: str) -> None:
    settings = Settings(clickhouse_url=clickhouse_server_url, clickhouse_database=f"steplens_{unique_name}")
    backend = open_backend(settings)
    try:
        assert isinstance(backend, ServerBackend) and isinstance(backend, Backend)
        assert backend.database == f"steplens_{unique_name}"
    finally:
        backend.execute(f"DROP DATABASE {quote_identifier(backend.database)}")
        backend.close()
