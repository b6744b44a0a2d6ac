"""Fixtures of the infra/ tests: the shared services, checked healthy through the public API."""

from __future__ import annotations

import pytest

from infra.launcher import InfraConfig, up


@pytest.fixture
def shared_cfg(kafka_bootstrap: str, clickhouse_server_url: str, infra_config: InfraConfig) -> InfraConfig:
    """The shared services, through the session fixtures of tests/conftest.py.

    Those start a service or reuse a running one, and stop at the end of the session
    only what the session started, so these tests never leave a server behind.
    ``up`` here re-checks cheaply (~0.3 s) that both are still healthy.
    """
    up(infra_config)  # raises InfraError (with log tails) if either service cannot start
    return infra_config
