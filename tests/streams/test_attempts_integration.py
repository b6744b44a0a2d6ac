"""Issue #21 item 4's restart acceptance, live: a job crashes, is relaunched from an earlier step
under the same id, a rank turns slow in the second attempt. Real broker, real ClickHouse 18.16,
the detect and land workers as subprocesses."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics
from sinks.server import ServerBackend
from steplens.demo import start_worker, stop_worker, wait_caught_up
from streams.topics_admin import ensure_topics
from tests.streams.helpers import alerts_topic

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]

ONSET = 35
TIMEOUT_S = 240.0


@pytest.fixture
def settings(kafka_settings: Settings, clickhouse_server_url: str, unique_name: str,
             tmp_path: Path) -> Iterator[Settings]:
    s = replace(kafka_settings, home=tmp_path, clickhouse_url=clickhouse_server_url,
                clickhouse_database=f"steplens_{unique_name}", topic_prefix=f"{unique_name}.", app_id=unique_name,
                topic_partitions=3)
    ensure_topics(s, Topics(s.topic_prefix), s.topic_partitions)
    yield s
    backend = ServerBackend(clickhouse_server_url, s.clickhouse_database)
    backend.execute(f"DROP DATABASE IF EXISTS {s.clickhouse_database}")
    backend.close()


def _send(s: Settings, events: list[object]) -> None:
    exporter = KafkaExporter(s.kafka_bootstrap, extra_config=kafka_client_config(s, "producer"))
    with BackgroundEmitter(exporter, Topics(s.topic_prefix)) as emitter:
        for event in events:
            assert emitter.emit(event)
        assert emitter.flush(timeout=60)
        assert emitter.stats().dropped_total == 0


def test_a_crash_and_a_relaunch_with_a_slow_rank_live(settings: Settings) -> None:
    s = settings
    topo = Topology(dp=4, tp=2, pp=2)
    first = FleetJob("relaunch-job", topo, steps=30, seed=1)  # killed after step 29: no end
    second = FleetJob("relaunch-job", topo, steps=60, seed=2, attempt=1, first_step=20,
                          start_ns=first.end_ns() + 60 * 10**9,
                      faults=[straggler(topo, 5, 1.3, start=ONSET, attempt=1)])
    env = {**os.environ, "STEPLENS_HOME": str(s.home), "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
           "STEPLENS_CLICKHOUSE_URL": s.clickhouse_url, "STEPLENS_CLICKHOUSE_DATABASE": s.clickhouse_database,
           "STEPLENS_TOPIC_PREFIX": s.topic_prefix, "STEPLENS_APP_ID": s.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
           "STEPLENS_DETECTION_JOB_SILENCE_S": "10"}
    workers = [start_worker(role, env, s.home) for role in ("detect", "land")]
    try:
        start, _ = first.job_events()
        _send(s, [start, *(e for events in first.iter_steps() for e in events)])
        deadline = time.monotonic() + TIMEOUT_S
        while not any(a.rule == "JOB_STOPPED" for a in alerts_topic(s)):
            assert all(w.poll() is None for w in workers) and time.monotonic() < deadline, "no JOB_STOPPED"
            time.sleep(1.0)
        start, end = second.job_events()
        _send(s, [start, *(e for events in second.iter_steps() for e in events), end])
        wait_caught_up(s, workers, lambda: None)
        while not all(a.state == "resolved" for a in {x.incident_id: x for x in alerts_topic(s)}.values()):
            assert time.monotonic() < deadline, "incidents left open"
            time.sleep(1.0)
    finally:
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0]
    alerts = alerts_topic(s)
    opened = [a for a in alerts if a.state == "open"]
    assert [a.rule for a in opened if a.rule == "JOB_STOPPED"] == ["JOB_STOPPED"], [(a.rule, a.summary) for a in opened]
    assert not [a for a in opened if a.rule.startswith("HUNG")]
    slow = [a for a in opened if a.rule == "SLOW_RANK"]
    assert [a.ranks for a in slow] == [[5]] and ONSET <= (slow[0].step_last or 0) <= ONSET + 5
    backend = ServerBackend(s.clickhouse_url, s.clickhouse_database)
    try:
        rows = backend.query(f"SELECT attempt, count(), min(step), max(step) FROM {s.clickhouse_database}.steps "
                             "FINAL WHERE job = 'relaunch-job' GROUP BY attempt ORDER BY attempt")
    finally:
        backend.close()
    assert [tuple(int(v) for v in r) for r in rows] == [(0, 16 * 30, 0, 29), (1, 16 * 40, 20, 59)]
