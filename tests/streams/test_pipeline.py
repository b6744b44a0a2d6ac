"""The thin slice end to end: simulator -> Kafka -> detect + land workers -> ClickHouse server.

Real broker, real ClickHouse 18.16 server, both Faust workers as subprocesses, exactly
as deployed. Detection is judged against the simulator's ground truth.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import ControlCommand, Incident, Topics, decode_as
from sinks.server import ServerBackend
from steplens.demo import malformed_events, query_results, start_worker, stop_worker, wait_caught_up
from streams.topics_admin import ensure_topics
from tests.streams.helpers import step_ms

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]


@pytest.fixture
def pipeline_settings(
    kafka_settings: Settings, clickhouse_server_url: str, unique_name: str, tmp_path: Path
) -> Iterator[Settings]:
    settings = replace(
        kafka_settings, home=tmp_path, clickhouse_url=clickhouse_server_url,
        clickhouse_database=f"steplens_{unique_name}", topic_prefix=f"{unique_name}.", app_id=unique_name,
        topic_partitions=3,
    )
    yield settings
    backend = ServerBackend(clickhouse_server_url, settings.clickhouse_database)
    backend.execute(f"DROP DATABASE IF EXISTS {settings.clickhouse_database}")
    backend.close()


def _read_all(settings: Settings, topic: str) -> list:
    consumer = KafkaConsumer(topic, **kafka_client_config(settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        return list(consumer)
    finally:
        consumer.close()


def test_slow_rank_and_slow_steps_are_found_landed_and_alerted(pipeline_settings: Settings) -> None:
    settings = pipeline_settings
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    topo = Topology(dp=4, tp=2, pp=2)
    job = FleetJob(job_id="pipeline-job", topology=topo, steps=40, seed=3,
                   faults=[straggler(topo, 6, 1.3), *gc_pauses(topo, (20, 21), 0.66 * step_ms(topo))])
    truth = job.ground_truth()
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_CLICKHOUSE_URL": settings.clickhouse_url,
           "STEPLENS_CLICKHOUSE_DATABASE": settings.clickhouse_database,
           "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions),
           "STEPLENS_SECRETS_DIR": str(settings.secrets_path)}
    t0 = time.time_ns()
    workers = [start_worker(role, env, settings.home) for role in ("detect", "land")]
    try:
        exporter = KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer"))
        with BackgroundEmitter(exporter, topics) as emitter:
            start, end = job.job_events()
            emitter.emit(start)
            for events in job.iter_steps():
                for event in events:
                    assert emitter.emit(event)
            emitter.emit(end)
            assert emitter.flush(timeout=60)
            assert emitter.stats().dropped_total == 0
        from kafka import KafkaProducer
        producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all")
        bad = malformed_events(job.job_id)
        for key, value in bad:
            producer.send(topics.steps, key=key, value=value)
        producer.flush()
        producer.close()
        wait_caught_up(settings, workers, lambda: None)
    finally:
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0], "workers must shut down cleanly"

    results = query_results(settings, job.job_id, t0)
    assert results["steps_rows"] == job.world * job.steps
    slow_rank_incidents = [i for i in results["incidents"] if i["rule"] == "SLOW_RANK"]
    assert {r for i in slow_rank_incidents for r in i["ranks"]} == truth.slow_ranks() == {6}
    slow_step_incidents = [i for i in results["incidents"] if i["rule"] == "SLOW_STEP"]
    found_steps = {s for i in slow_step_incidents for s in range(i["step_first"], i["step_last"] + 1)}
    assert found_steps == truth.slow_steps() == {20, 21}
    assert all(i["state"] == "resolved" for i in results["incidents"])
    assert results["dead_letters"] == len(bad)

    # downstream consumers see the same incidents on the alerts topic
    alerts = [decode_as(Incident, m.value) for m in _read_all(settings, topics.incidents)]
    assert {a.incident_id for a in alerts} == {i["incident_id"] for i in results["incidents"]}
    # coarse-to-fine: the slow rank is asked for detailed profiling
    commands = [decode_as(ControlCommand, m.value) for m in _read_all(settings, topics.control)]
    assert [(c.action, c.ranks) for c in commands] == [("profile_on", [6])]
    # every malformed event is on the dead-letter topic byte for byte, with its reason
    letters = [m for m in _read_all(settings, topics.deadletter)
               if dict(m.headers)["steplens-source-topic"] == topics.steps.encode()]
    assert sorted(m.value for m in letters) == sorted(v for _, v in bad)
    reasons = [dict(m.headers)["steplens-reason"].decode() for m in letters]
    assert any("not valid JSON" in r for r in reasons)
    assert any("unsupported major version 2" in r for r in reasons)
    assert any("must be >= start_ns" in r for r in reasons)
