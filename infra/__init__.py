"""The floor every stage stands on (settings, client glue) and the local service launcher.

Use ``python -m infra up|down|status [--only kafka|clickhouse]`` from a shell, or the
launcher classes below from Python (test fixtures do); see ``infra/services.py``.

The launcher's names are imported on first use (PEP 562): a training rank imports the hook,
the hook imports ``infra.settings``, and that must not load the broker supervisor, TLS
(``cryptography``) and the ClickHouse server launcher into every rank (issue #47).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.clickhouse_server import ClickHouseServer
    from infra.config import InfraConfig
    from infra.kafka_broker import KafkaBroker
    from infra.process import InfraError
    from infra.services import down, status, up

_LAZY = {
    "ClickHouseServer": "infra.clickhouse_server",
    "InfraConfig": "infra.config",
    "InfraError": "infra.process",
    "KafkaBroker": "infra.kafka_broker",
    "down": "infra.services",
    "status": "infra.services",
    "up": "infra.services",
}

__all__ = ["ClickHouseServer", "InfraConfig", "InfraError", "KafkaBroker", "down", "status", "up"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'infra' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
