"""Session fixtures for the real services.

Integration tests declare what they touch (`@pytest.mark.kafka`, `@pytest.mark.clickhouse`)
and take these fixtures. A fixture starts the service through infra/ or reuses a running
one; if the service cannot start the fixture raises, so the test fails loudly instead of
being skipped. Services this session started are stopped at the end of the session.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from infra import ClickHouseServer, InfraConfig, KafkaBroker


@pytest.fixture(scope="session")
def infra_config() -> InfraConfig:
    return InfraConfig.from_env()


@pytest.fixture(scope="session")
def kafka_bootstrap(infra_config: InfraConfig) -> Iterator[str]:
    """Bootstrap address of the real Kafka broker (started by infra/ when not running)."""
    broker = KafkaBroker(infra_config)
    broker.install()
    started = broker.start()
    yield broker.bootstrap
    if started and not os.environ.get("STEPLENS_KEEP_SERVICES"):
        broker.stop()


@pytest.fixture(scope="session")
def clickhouse_server_url(infra_config: InfraConfig) -> Iterator[str]:
    """URL of the real ClickHouse server (Debian's 18.16, started by infra/ when not running)."""
    server = ClickHouseServer(infra_config)
    server.install()
    started = server.start()
    yield server.url
    if started and not os.environ.get("STEPLENS_KEEP_SERVICES"):
        server.stop()


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses: per-test topics, databases and job ids."""
    return f"t{uuid.uuid4().hex[:12]}"
