"""Project-local Kafka (KRaft) and ClickHouse servers on loopback: ``up``, ``down`` and ``status``.

Why: integration tests and benchmarks need *real* services, but the machines that run
them have no Docker and must not be reconfigured system-wide.  Everything lives under
one project-local home directory (``.steplens/`` by default; its layout: infra/launcher/config.py):
generated configs, data, logs, pid files and the Kafka jars resolved from Maven Central.
Every operation is idempotent so test fixtures, the Makefile and humans can all call it safely.

The parts: ``infra/launcher/config.py`` (``InfraConfig``: home and ports), ``infra/launcher/supervision.py``
(the process lifecycle every service shares), ``infra/launcher/kafka_broker.py`` (``KafkaBroker``) and
``infra/launcher/clickhouse_server.py`` (``ClickHouseServer``). Kafka listens with SASL/SCRAM-SHA-512
over TLS only; ClickHouse has a password on every user (docs/security.md).
"""

from __future__ import annotations

from infra.launcher.clickhouse_server import ClickHouseServer
from infra.launcher.config import InfraConfig
from infra.launcher.kafka_broker import KafkaBroker
from infra.launcher.supervision import _Service, stop_each


def up(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> dict[str, bool]:
    """Start the selected services; returns name -> whether this call started it."""
    started: dict[str, bool] = {}
    if clickhouse:
        server = ClickHouseServer(cfg)
        server.install()
        started["clickhouse"] = server.start()
    if kafka:
        broker = KafkaBroker(cfg)
        broker.install()
        started["kafka"] = broker.start()
    return started


def down(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> None:
    """Stop the selected services; tries all of them before reporting failures."""
    services: list[_Service] = []
    if kafka:
        services.append(KafkaBroker(cfg))
    if clickhouse:
        services.append(ClickHouseServer(cfg))
    stop_each(services)


def status(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> str:
    """Human-readable state of each service plus where the logs are."""
    lines: list[str] = []
    if kafka:
        lines.append(KafkaBroker(cfg).describe())
    if clickhouse:
        lines.append(ClickHouseServer(cfg).describe())
    lines.append(f"home: {cfg.home}")
    lines.append(f"logs: {cfg.logs_dir}")
    lines.append(f"secrets: {cfg.secrets_dir} (passwords, CA; docs/security.md)")
    return "\n".join(lines)
