"""Local Kafka + ClickHouse for steplens development and tests.

Use ``python -m infra up|down|status [--only kafka|clickhouse]`` from a shell, or the
classes below from Python (test fixtures do).  See ``infra/services.py`` for the parts.
"""

from infra.clickhouse_server import ClickHouseServer
from infra.config import InfraConfig
from infra.kafka_broker import KafkaBroker
from infra.process import InfraError
from infra.services import down, status, up

__all__ = [
    "ClickHouseServer",
    "InfraConfig",
    "InfraError",
    "KafkaBroker",
    "down",
    "status",
    "up",
]
