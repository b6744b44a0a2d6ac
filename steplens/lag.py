"""Consumer-group lag: how an operator (and the demo) knows a worker has caught up."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from infra.clients import kafka_client_config
from infra.settings import Settings


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


def wait_pipeline_caught_up(settings: Settings, groups: Mapping[str, Sequence[str]],
                            workers: Sequence[subprocess.Popen[bytes]], *, timeout_s: float | None = None,
                            stall_s: float | None = None, on_poll: Callable[[], None] = lambda: None,
                            every_s: float = 1.0) -> None:
    """Poll every group's lag on its topics until all are 0 twice in a row (a record that one worker
    publishes late for the next must be consumed too); raise when a worker exits, when `timeout_s`
    passes, or when the total lag has not shrunk for `stall_s` (a slow worker is fine, a stuck one
    is not). A retriable Kafka error (a broker still loading its group coordinator) is one more
    poll; `on_poll` runs after each poll (the demo drains alerts there)."""
    start = last_progress = time.monotonic()
    best: int | None = None
    clean = 0
    lags: dict[str, dict[str, int]] = {}
    while clean < 2:
        for proc in workers:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited early with code {proc.returncode}; see .steplens/logs/")
        try:
            lags = {group: group_lag(settings, group, names) for group, names in groups.items()}
            total = sum(v for lag in lags.values() for v in lag.values())
        except KafkaError as exc:
            if not getattr(exc, "retriable", False):
                raise
            lags, total = {"unavailable": {type(exc).__name__: 1}}, -1
        on_poll()
        now = time.monotonic()
        if total >= 0 and (best is None or total < best):
            best, last_progress = total, now
        clean = clean + 1 if total == 0 else 0
        if clean >= 2:
            return
        if timeout_s is not None and now - start > timeout_s:
            raise RuntimeError(f"workers did not catch up within {timeout_s:.0f}s: lag {lags}")
        if stall_s is not None and now - last_progress > stall_s:
            raise RuntimeError(f"workers made no progress for {stall_s:.0f}s: lag {lags}")
        time.sleep(every_s)
