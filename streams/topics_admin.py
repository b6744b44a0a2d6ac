"""Create steplens' topics up front, so workers never depend on broker auto-creation."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra.clients import kafka_client_config
from schemas import Topics
from steplens.config import Settings

log = logging.getLogger(__name__)

# Dead letters may hold events up to the broker's own limit.
TOPIC_CONFIG = {"max.message.bytes": "4194304"}
# Engine snapshots: compacted (only the newest per job matters), large values allowed.
STATE_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": str(64 * 1024 * 1024)}


@dataclass(frozen=True, slots=True)
class DetectTopics:
    """The detect workers' internal topics (not part of the event contract)."""

    prefix: str = "steplens."

    @property
    def partials(self) -> str:
        """Column chunks per (job, kind, batch), keyed by job: the one shuffle of the engine."""
        return f"{self.prefix}detect-partials"

    @property
    def state(self) -> str:
        """Compacted per-job engine snapshots (streams/state/store.py)."""
        return f"{self.prefix}detect-state"


def ensure_topics(settings: Settings, topics: Topics, partitions: int) -> list[str]:
    """Create every missing steplens topic; return the names created."""
    internal = DetectTopics(topics.prefix)
    wanted = {name: TOPIC_CONFIG for name in topics.all()}
    wanted[internal.partials] = TOPIC_CONFIG
    wanted[internal.state] = STATE_CONFIG
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-admin")
    try:
        existing = set(admin.list_topics())
        missing = [name for name in wanted if name not in existing]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker won the race
                admin.create_topics(
                    [NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=wanted[name])
                     for name in missing]
                )
            log.info("created topics %s", missing)
        return missing
    finally:
        admin.close()
