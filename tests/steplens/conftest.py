"""Both backends for the CLI tests (the sink tests' fixtures), and the fleet loaded into them."""

from __future__ import annotations

import pytest

from sinks.backend import Backend
from tests.sinks.conftest import backend, embedded_backend, server_backend
from tests.sinks.landing import point_cli_at
from tests.steplens.fleet_data import Truth, load

__all__ = ["backend", "embedded_backend", "server_backend"]


@pytest.fixture
def fleet(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> tuple[Backend, Truth]:
    """The test fleet in `backend`, with STEPLENS_* pointing the CLI at the same database."""
    truth = load(backend)
    point_cli_at(backend, monkeypatch)
    return backend, truth
