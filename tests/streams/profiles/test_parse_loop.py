"""The coarse-to-fine loop end to end on real Kafka and a real ClickHouse server:

incident opens (detect) -> profile_on (control) -> the "rank" answers with a dump in the profile
root and a ProfileReady -> the parse worker diagnoses it -> an incident update lands on the same
incident, with cause and optimisation. A truncated dump sent first must give a clear error on
the incident and a dead letter, and the worker must go on to the good one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from infra.clients import kafka_client_config
from infra.settings import Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import ControlCommand, Incident, ProfileReady, Topics, decode_as, encode, rank_key
from sinks.server import ServerBackend
from steplens.demo import start_worker, stop_worker
from streams.topics_admin import ensure_topics
from tests.streams.profiles.conftest import ASCEND

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]

DEADLINE_S = 240.0


@pytest.fixture
def loop_settings(kafka_settings: Settings, clickhouse_server_url: str, unique_name: str,
                  tmp_path: Path) -> Iterator[Settings]:
    settings = replace(
        load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
        secrets_dir=kafka_settings.secrets_path, clickhouse_url=clickhouse_server_url,
        clickhouse_database=f"steplens_{unique_name}", topic_prefix=f"{unique_name}.", app_id=unique_name,
        topic_partitions=2, profile_roots=str(tmp_path / "profiles"),
    )
    yield settings
    backend = ServerBackend(clickhouse_server_url, settings.clickhouse_database)
    backend.execute(f"DROP DATABASE IF EXISTS {settings.clickhouse_database}")
    backend.close()


def _poll_records(consumer: KafkaConsumer, until: float) -> list[Any]:
    out: list[Any] = []
    for records in consumer.poll(timeout_ms=1000).values():
        out.extend(records)
    if time.monotonic() > until:
        raise TimeoutError("the loop did not close in time; see the worker logs in the test's tmp dir")
    return out


def _poll(consumer: KafkaConsumer, until: float) -> list[bytes]:
    return [r.value for r in _poll_records(consumer, until)]


def test_incident_profile_diagnosis_loop(loop_settings: Settings, real_samples: Path) -> None:
    settings = loop_settings
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    root = settings.profile_root_paths[0]
    root.mkdir(parents=True)
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_SECRETS_DIR": str(settings.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_CLICKHOUSE_URL": settings.clickhouse_url,
           "STEPLENS_CLICKHOUSE_DATABASE": settings.clickhouse_database, "STEPLENS_TOPIC_PREFIX": settings.topic_prefix,
           "STEPLENS_APP_ID": settings.app_id, "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions),
           "STEPLENS_PROFILE_ROOTS": str(root)}
    topo = Topology(dp=4, tp=2, pp=1)
    job = FleetJob(job_id="loop-job", topology=topo, steps=30, seed=5, faults=[straggler(topo, 3, 1.3)])
    workers = [start_worker(role, env, settings.home) for role in ("detect", "land", "parse")]
    config = kafka_client_config(settings, "admin")
    control = KafkaConsumer(topics.control, auto_offset_reset="earliest", enable_auto_commit=False, **config)
    alerts = KafkaConsumer(topics.incidents, auto_offset_reset="earliest", enable_auto_commit=False, **config)
    letters = KafkaConsumer(topics.deadletter, auto_offset_reset="earliest", enable_auto_commit=False, **config)
    producer = KafkaProducer(acks="all", **kafka_client_config(settings, "producer"))
    until = time.monotonic() + DEADLINE_S
    try:
        with BackgroundEmitter(
            KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer")),
            topics) as emitter:
            start, _end = job.job_events()
            emitter.emit(start)
            for events in job.iter_steps():
                for event in events:
                    assert emitter.emit(event)
            assert emitter.flush(timeout=60)
        # the rank side: wait for profile_on, answer with a truncated dump, then a real one
        command: ControlCommand | None = None
        while command is None:
            for raw in _poll(control, until):
                c = decode_as(ControlCommand, raw)
                if c.action == "profile_on":
                    command = c
        assert command.incident_id and command.ranks == [3]
        rank = command.ranks[0]
        bad = root / job.job_id / "bad" / "trace.json"
        bad.parent.mkdir(parents=True)
        bad.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}, {"ph": "X", "na')
        good = root / job.job_id / f"rank{rank}_ascend_pt"
        shutil.copytree(ASCEND / "rank1_ascend_pt", good)  # into the test's tmp profile root, not the repo
        for uri in (str(bad), str(good)):
            ready = ProfileReady(job=job.job_id, rank=rank, host=f"node-{rank}", format="ascend_pt" if uri == str(good)
                                 else "kineto", uri=uri, step_first=command.step_first,
                                 step_last=command.step_first + command.step_count - 1, ts_ns=time.time_ns(),
                                 command_id=command.command_id)
            producer.send(topics.profiles, key=rank_key(job.job_id, rank), value=encode(ready))
        producer.flush()
        # both answers land on the incident that asked, as DIAGNOSIS updates
        diagnoses: list[Incident] = []
        while len(diagnoses) < 2:
            for raw in _poll(alerts, until):
                incident = decode_as(Incident, raw)
                if incident.rule == "DIAGNOSIS":
                    diagnoses.append(incident)
        failed, ok = diagnoses
        assert {failed.incident_id, ok.incident_id} == {command.incident_id}
        assert failed.state == ok.state == "update"
        assert "could not be analysed" in failed.summary and "truncated" in failed.summary
        assert ok.cause and ok.suggestion and "evidence" in ok.summary
        assert all(p.poll() is None for p in workers), "a worker died"
        dead: list[Any] = []
        while not dead:
            dead = _poll_records(letters, until)
        assert decode_as(ProfileReady, dead[0].value).uri == str(bad)
        # the headers every stage's dead letters carry (schemas/dead_letter.py): why, and where from
        headers = dict(dead[0].headers)
        assert headers["steplens-source-topic"] == topics.profiles.encode()
        assert int(headers["steplens-source-partition"]) in range(settings.topic_partitions)
        assert int(headers["steplens-source-offset"]) >= 0
        assert headers["steplens-reason"] and headers["steplens-field"]
        # the breakdown landed in ClickHouse
        backend = ServerBackend(settings.clickhouse_url, settings.clickhouse_database)
        try:
            rows: list[tuple[object, ...]] = []
            while not rows:
                rows = backend.query(f"SELECT rank, step, compute_us FROM {settings.clickhouse_database}"
                                     f".profile_breakdowns WHERE job = '{job.job_id}'")
                if not rows:
                    _poll(letters, until)  # paces the loop and enforces the deadline
            assert rows[0][0] == rank and rows[0][1] == 50
            assert abs(float(rows[0][2]) - 8878.295) / 8878.295 < 0.02  # rank1 sample's step_trace_time.csv
        finally:
            backend.close()
    finally:
        for c in (control, alerts, letters):
            c.close()
        producer.close()
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0, 0], "workers must shut down cleanly"
