"""The land worker lives through a broker outage and lands everything once (real broker, real worker).

`make chaos` found the landing loop exiting (code 70) when the commit of a batch it had just landed
timed out with the broker away, and this test then found it exiting when a poll raised a lost
connection: without a supervisor, nothing was landed for the rest of the run. Here the broker is
stopped while a producer keeps sending and the worker holds a batch (it lands every 3 s), kept
away until the worker logs a failed commit or poll that it retries, and started again.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from infra.clients import kafka_client_config
from infra.launcher import InfraConfig, KafkaBroker
from infra.settings import Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics
from sinks import open_backend
from steplens.demo import start_worker, stop_worker
from steplens.lag import wait_group_caught_up
from streams.land.processor import landing_types
from streams.topics_admin import ensure_topics
from tests.producers.test_kafka_integration import exporter_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.exclusive]

RETRIED = (b"land commit failed", b"land poll failed")  # the runtime's log lines when it retries (streams/runtime.py)


def _committed(settings: Settings, topic: str) -> int:
    """Offsets the land group has committed on `topic`, over its partitions (0 before the first commit)."""
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-test")
    try:
        group = f"{settings.app_id}-land"
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    finally:
        admin.close()
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset > 0)


def _wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def test_the_land_worker_lives_through_a_broker_outage(kafka_settings: Settings, infra_config: InfraConfig,
                                                       unique_name: str, tmp_path: Path) -> None:
    settings = replace(load_settings({}), home=tmp_path / "home", kafka_bootstrap=kafka_settings.kafka_bootstrap,
                       secrets_dir=kafka_settings.secrets_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2)
    settings.home.mkdir(parents=True)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    chdb = tmp_path / "chdb"
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_SECRETS_DIR": str(settings.secrets_path),
           "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "STEPLENS_TOPIC_PREFIX": settings.topic_prefix,
           "STEPLENS_APP_ID": settings.app_id, "STEPLENS_TOPIC_PARTITIONS": "2", "STEPLENS_CLICKHOUSE_URL": "",
           "STEPLENS_CHDB_PATH": str(chdb), "STEPLENS_SINK_BATCH_SECONDS": "3"}
    log = settings.home / "worker-land.log"
    land = start_worker("land", env, settings.home)
    job = FleetJob(unique_name, Topology(dp=4, tp=2, pp=1), 1200, [], seed=3)
    emitter = BackgroundEmitter(exporter_for(settings), topics, spool_dir=tmp_path / "spool", flush_interval_s=0.05,
                                retry_backoff_max_s=1.0)
    stop = threading.Event()

    def produce() -> None:
        for events in job.iter_steps():
            if stop.is_set():
                return
            emitter.emit_batch(events)
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    broker = KafkaBroker(infra_config)
    try:
        producer.start()
        # the worker is up and landing: its group has committed a batch of steps
        assert _wait_for(lambda: land.poll() is not None or _committed(settings, topics.steps) > 0, 120), \
            "the land worker never committed"
        assert land.poll() is None, f"the land worker exited ({land.returncode}) before the outage"
        broker.stop()
        try:
            retried = _wait_for(lambda: any(line in log.read_bytes() for line in RETRIED) or land.poll() is not None,
                                120)
            assert land.poll() is None, f"the land worker exited ({land.returncode}) while the broker was away"
            assert retried, "the land worker met no failing broker call while the broker was away"
        finally:
            broker.start(timeout=120)
        stop.set()
        producer.join(30)
        assert emitter.flush(120), emitter.stats()
        stats = emitter.stats()
        assert emitter.close(timeout=30)
        assert stats.dropped == {}
        assert wait_group_caught_up(settings, f"{settings.app_id}-land", list(landing_types(topics)), 180,
                                    alive=lambda: land.poll() is None), "the land worker did not catch up"
        assert land.poll() is None, "the land worker exited after the outage"
    finally:
        stop.set()
        code = stop_worker(land)
    assert code == 0
    sent = stats.exported  # every step event the producer handed to Kafka (nothing dropped or pending)
    backend = open_backend(replace(settings, clickhouse_url="", chdb_path=chdb))
    try:
        [(rows, keys)] = backend.query(f"SELECT count(), uniqExact(rank, step) FROM {backend.database}.steps "
                                       f"WHERE job = '{job.job_id}'")
    finally:
        backend.close()
    assert int(keys) == sent and int(rows) == sent, (rows, keys, sent)  # all landed, none twice (no FINAL)
