"""How every steplens Kafka client connects: one place for addresses, credentials and TLS.

Every producer, consumer, admin client and Faust app in steplens builds its connection
settings here, naming the principal it acts as, so the broker's listeners, SASL users and
ACLs (set up by infra/) and the clients can never disagree.

Principals:
- ``producer``: rank hooks, samplers, the simulator: write telemetry topics, read control;
- ``detect`` / ``land`` / ``parse``: the workers;
- ``reader``: downstream alert consumers and reports (read incidents);
- ``admin``: topic creation, lag checks, tests and benchmarks.
"""

from __future__ import annotations

from typing import Any, Literal

from steplens.config import Settings

Principal = Literal["producer", "detect", "land", "parse", "reader", "admin"]


def kafka_client_config(settings: Settings, principal: Principal) -> dict[str, Any]:
    """Keyword arguments for kafka-python's KafkaProducer / KafkaConsumer / KafkaAdminClient."""
    del principal  # plain listener for now; credentials and TLS per principal come with lock-down
    return {"bootstrap_servers": settings.kafka_bootstrap}


def faust_broker_config(settings: Settings, principal: Principal) -> dict[str, Any]:
    """Keyword arguments for faust.App: the broker URL (and credentials, with lock-down)."""
    del principal
    return {"broker": f"kafka://{settings.kafka_bootstrap}"}
