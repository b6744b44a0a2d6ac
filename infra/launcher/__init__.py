"""The local service launcher: Kafka (one node or three), ClickHouse (server or 2x2 cluster), ZooKeeper,
Prometheus and Alertmanager on loopback, with their TLS, secrets and Debian packages.

Used by `make up|down|status` (``python -m infra.launcher``), the test fixtures, the benches and
`steplens up|demo`; never by a worker or a training rank, which stand on `infra/` alone. See
``infra/launcher/services.py``.
"""

from __future__ import annotations

from infra.launcher.clickhouse_server import ClickHouseServer
from infra.launcher.config import InfraConfig
from infra.launcher.kafka_broker import KafkaBroker
from infra.launcher.process import InfraError
from infra.launcher.services import down, status, up

__all__ = ["ClickHouseServer", "InfraConfig", "InfraError", "KafkaBroker", "down", "status", "up"]
