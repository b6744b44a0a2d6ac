"""Session fixtures for the real services.

Integration tests declare what they touch (`@pytest.mark.kafka`, `@pytest.mark.clickhouse`,
`@pytest.mark.alertmanager`, `@pytest.mark.prometheus`, `@pytest.mark.slurm`; `@pytest.mark.cluster`: tests/cluster/,
whose own conftest starts the loopback cluster) and take these fixtures. A fixture
starts the service through infra/ or reuses a running one; if the service cannot start the
fixture raises, so the test fails loudly instead of being skipped. Services this run
started are stopped at its end.

`make test` runs the service tests two at a time (`pytest -n 2 --dist loadfile`): they share the
broker and the server, each on its own topics, databases and consumer groups (`unique_name`).
A test that stops a shared service or starts the loopback cluster is marked `exclusive` and runs
in a later pass on its own.

The services are locked down (docs/security.md): Kafka clients take `kafka_settings` and
build their connection with `infra.clients.kafka_client_config(kafka_settings, principal)`;
`clickhouse_server_url` carries the `steplens_writer` credentials, `clickhouse_reader_url`
the read-only user's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker
from infra.launcher.alertmanager import AlertmanagerServer
from infra.launcher.prometheus import PrometheusServer
from infra.launcher.slurm import SlurmCluster
from infra.secrets import CLICKHOUSE_READER, CLICKHOUSE_WRITER
from infra.settings import Settings
from tests.file_timings import FileTimings


class _Service(Protocol):
    @property
    def name(self) -> str: ...

    def install(self) -> None: ...

    def start(self) -> bool: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Service)


STARTED_DIR_ENV = "STEPLENS_TEST_STARTED_DIR"


def _run_for_the_session(service: S) -> Iterator[S]:
    """Install and start `service` (or reuse a running one), one pytest process at a time.

    Under `pytest -n` each worker has its own session: a lock keeps two from starting the same
    service, and the one that started it leaves a mark for the controller, which stops it after
    every worker is done (`pytest_unconfigure`), so no worker stops a service another still uses.
    """
    started_dir, name = Path(os.environ[STARTED_DIR_ENV]), service.name
    with (started_dir / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        service.install()
        if service.start():
            (started_dir / name).touch()
    yield service


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
    """The real Prometheus (Debian's prometheus) with the shipped config and rules (infra/launcher/prometheus.py)."""
    yield from _run_for_the_session(PrometheusServer(infra_config))


@pytest.fixture(scope="session")
def slurm_cluster(infra_config: InfraConfig) -> Iterator[SlurmCluster]:
    """A real Slurm on loopback (Debian's slurm-wlm: munged, slurmctld, 4 slurmd; infra/launcher/slurm.py)."""
    yield from _run_for_the_session(SlurmCluster(infra_config))


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses: per-test topics, databases and job ids."""
    return f"t{uuid.uuid4().hex[:12]}"


_SERVICES: dict[str, Callable[[InfraConfig], _Service]] = {
    service.name: service for service in (KafkaBroker, ClickHouseServer, AlertmanagerServer, PrometheusServer,
                                          SlurmCluster)
}


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FileTimings(), "steplens-file-timings")
    if not _is_xdist_worker(config):  # the controller, or a run without -n: its workers inherit the directory
        os.environ[STARTED_DIR_ENV] = tempfile.mkdtemp(prefix="steplens-test-services-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the services this run started (after all of its workers), unless STEPLENS_KEEP_SERVICES."""
    if _is_xdist_worker(config) or STARTED_DIR_ENV not in os.environ:
        return
    started_dir = Path(os.environ.pop(STARTED_DIR_ENV))
    if not os.environ.get("STEPLENS_KEEP_SERVICES"):
        cfg = InfraConfig.from_env()
        for name, service in _SERVICES.items():
            if (started_dir / name).exists():
                service(cfg).stop()
    shutil.rmtree(started_dir, ignore_errors=True)
