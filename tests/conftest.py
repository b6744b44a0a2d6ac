"""Session fixtures for the real services.

Integration tests declare what they touch (`@pytest.mark.kafka`, `@pytest.mark.clickhouse`,
`@pytest.mark.alertmanager`, `@pytest.mark.prometheus`; `@pytest.mark.cluster`: tests/cluster/,
whose own conftest starts the loopback cluster) and take these fixtures. A fixture
starts the service through infra/ or reuses a running one; if the service cannot start the
fixture raises, so the test fails loudly instead of being skipped. Services this session
started are stopped at the end of the session.

The services are locked down (docs/security.md): Kafka clients take `kafka_settings` and
build their connection with `infra.clients.kafka_client_config(kafka_settings, principal)`;
`clickhouse_server_url` carries the `steplens_writer` credentials, `clickhouse_reader_url`
the read-only user's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Protocol, TypeVar

import pytest

from infra import ClickHouseServer, InfraConfig, KafkaBroker
from infra.alertmanager import AlertmanagerServer
from infra.prometheus import PrometheusServer
from infra.secrets import CLICKHOUSE_READER, CLICKHOUSE_WRITER
from infra.settings import Settings
from tests.file_timings import FileTimings


class _Service(Protocol):
    def install(self) -> None: ...

    def start(self) -> bool: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Service)


def _run_for_the_session(service: S) -> Iterator[S]:
    """Install and start `service` (or reuse a running one); stop it at the end if this session started it."""
    service.install()
    started = service.start()
    yield service
    if started and not os.environ.get("STEPLENS_KEEP_SERVICES"):
        service.stop()


@pytest.fixture(scope="session")
def infra_config() -> InfraConfig:
    return InfraConfig.from_env()


@pytest.fixture(scope="session")
def kafka_bootstrap(infra_config: InfraConfig) -> Iterator[str]:
    """Bootstrap address of the real Kafka broker (started by infra/ when not running)."""
    for broker in _run_for_the_session(KafkaBroker(infra_config)):
        yield broker.bootstrap


@pytest.fixture(scope="session")
def kafka_settings(kafka_bootstrap: str, infra_config: InfraConfig) -> Settings:
    """Settings that reach the test broker: its address and the secrets directory of its home.

    Pass them (with `dataclasses.replace` for per-test prefixes) to `kafka_client_config`,
    `ensure_topics` or a worker's environment (`STEPLENS_SECRETS_DIR`).
    """
    return replace(infra_config.client_settings(), kafka_bootstrap=kafka_bootstrap)


@pytest.fixture(scope="session")
def clickhouse_service(infra_config: InfraConfig) -> Iterator[ClickHouseServer]:
    """The real ClickHouse server (Debian's 18.16, started by infra/ when not running)."""
    yield from _run_for_the_session(ClickHouseServer(infra_config))


@pytest.fixture(scope="session")
def clickhouse_server_url(clickhouse_service: ClickHouseServer) -> str:
    """URL of the real ClickHouse server, as the `steplens_writer` user (landing, DDL, tests' cleanup)."""
    return clickhouse_service.url_for(CLICKHOUSE_WRITER)


@pytest.fixture(scope="session")
def clickhouse_reader_url(clickhouse_service: ClickHouseServer) -> str:
    """URL of the real ClickHouse server, as the read-only `steplens_reader` user."""
    return clickhouse_service.url_for(CLICKHOUSE_READER)


@pytest.fixture(scope="session")
def alertmanager_service(infra_config: InfraConfig) -> Iterator[AlertmanagerServer]:
    """The real Alertmanager (Debian's prometheus-alertmanager, installed and started by infra/ when missing)."""
    yield from _run_for_the_session(AlertmanagerServer(infra_config))


@pytest.fixture(scope="session")
def prometheus_service(infra_config: InfraConfig) -> Iterator[PrometheusServer]:
    """The real Prometheus (Debian's prometheus) with the shipped config and rules (infra/prometheus.py)."""
    yield from _run_for_the_session(PrometheusServer(infra_config))


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses: per-test topics, databases and job ids."""
    return f"t{uuid.uuid4().hex[:12]}"


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FileTimings(), "steplens-file-timings")
