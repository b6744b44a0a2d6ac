"""Both backends for the CLI tests (the sink tests' fixtures), and the fleet loaded into them."""

from __future__ import annotations

import pytest

from sinks.backend import Backend
from sinks.embedded import EmbeddedBackend
from tests.sinks.conftest import backend, embedded_backend, server_backend
from tests.steplens.fleet_data import Truth, load

__all__ = ["backend", "embedded_backend", "server_backend"]


@pytest.fixture
def fleet(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> tuple[Backend, Truth]:
    """The test fleet in `backend`, with STEPLENS_* pointing the CLI at the same database."""
    truth = load(backend)
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_DATABASE", backend.database)
    if isinstance(backend, EmbeddedBackend):
        monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
        monkeypatch.setenv("STEPLENS_CHDB_PATH", str(backend.path))
    else:
        address = backend.address  # type: ignore[attr-defined]
        monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", f"clickhouse://{address.host}:{address.port}")
    return backend, truth
