"""Consumer-group lag: how an operator (and the demo) knows a worker has caught up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient

from infra.clients import kafka_client_config
from steplens.config import Settings


def group_lag(settings: Settings, group: str, topics: Sequence[str]) -> dict[str, int]:
    """Messages per topic that `group` has not committed yet (end offset - committed offset)."""
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-lag")
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), client_id="steplens-lag",
                             enable_auto_commit=False)
    try:
        committed = admin.list_group_offsets({group: None}).get(group, {})
        partitions = [
            TopicPartition(topic, p) for topic in topics for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        ends = consumer.end_offsets(partitions)
        lag: dict[str, int] = dict.fromkeys(topics, 0)
        for tp in partitions:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag[tp.topic] += max(0, ends[tp] - done)
        return lag
    finally:
        consumer.close()
        admin.close()


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), client_id="steplens-offsets",
                             enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: off for tp, off in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def wait_group_caught_up(settings: Settings, group: str, topics: Sequence[str], timeout_s: float,
                         alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll `group`'s lag on `topics` once a second until it is 0 (True); False once `timeout_s`
    passed or `alive()` (the consuming worker still runs) turned false. A lag query that fails
    (a broker still loading its group coordinator) counts as not caught up yet."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        try:
            if all(v == 0 for v in group_lag(settings, group, topics).values()):
                return True
        except Exception:
            pass
        time.sleep(1.0)
    return False
