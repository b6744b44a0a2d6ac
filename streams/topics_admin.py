"""Create steplens' topics up front, so workers never depend on broker auto-creation."""

from __future__ import annotations

import contextlib
import logging

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra.clients import kafka_client_config
from schemas import Topics
from steplens.config import Settings

log = logging.getLogger(__name__)

# Dead letters may hold events up to the broker's own limit.
TOPIC_CONFIG = {"max.message.bytes": "4194304"}


def ensure_topics(settings: Settings, topics: Topics, partitions: int) -> list[str]:
    """Create every missing steplens topic; return the names created."""
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-admin")
    try:
        existing = set(admin.list_topics())
        missing = [name for name in topics.all() if name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker won the race
                admin.create_topics(
                    [NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=TOPIC_CONFIG)
                     for name in missing]
                )
            log.info("created topics %s", missing)
        return missing
    finally:
        admin.close()
