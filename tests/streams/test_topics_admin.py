"""Topic lifecycle against the real broker: a benchmark's topics are expired after its run (topic
deletion is locked down), and no topic of another prefix is touched."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from infra.clients import kafka_client_config
from infra.settings import Settings
from schemas import Topics
from streams.topics_admin import ensure_topics, expire_topics

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _retention_ms(settings: Settings, names: list[str]) -> dict[str, str]:
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"))
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                           config_filter="all")
        return {name: str(configs["retention.ms"]["value"]) for name, configs in described["topic"].items()}
    finally:
        admin.close()


def test_expire_topics_sets_one_prefix_to_drop_its_data(kafka_settings: Settings, unique_name: str) -> None:
    mine = replace(kafka_settings, topic_prefix=f"{unique_name}a.")
    other = replace(kafka_settings, topic_prefix=f"{unique_name}b.")
    for s in (mine, other):
        ensure_topics(s, Topics(s.topic_prefix), 1)
    names, others = list(Topics(mine.topic_prefix).all()), list(Topics(other.topic_prefix).all())
    before = _retention_ms(kafka_settings, others)

    assert sorted(expire_topics(mine, Topics(mine.topic_prefix))) == sorted(names)
    assert _retention_ms(kafka_settings, names) == dict.fromkeys(names, "1")
    assert _retention_ms(kafka_settings, others) == before and "1" not in before.values()
