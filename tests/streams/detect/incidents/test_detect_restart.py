"""A detect worker SIGKILLed mid-job and restarted: one incident per fault, one profile_on, nothing left open.

Real broker, the real detect worker as a subprocess, a simulated job with a slow rank; the
verdict is judged against the simulator's ground truth and the alerts/control topics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from infra.clients import kafka_client_config
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import ControlCommand, Incident, Topics, decode_as
from streams.topics_admin import ensure_topics
from tests.streams.helpers import wait_topics_visible

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _start(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_SECRETS_DIR": str(settings.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions)}
    out = open(log, "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen([sys.executable, "-m", "streams", "worker", "--role", "detect"], cwd=REPO_ROOT,
                            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _read(settings: Settings, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(topic, **kafka_client_config(settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_a_killed_and_restarted_detect_worker_keeps_one_incident_per_fault(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    settings = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
        secrets_dir=kafka_settings.secrets_path,
                       topic_prefix=f"{unique_name}.", app_id=unique_name, topic_partitions=2)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    topo = Topology(dp=4, tp=2, pp=1)
    job = FleetJob(job_id=f"{unique_name}-job", topology=topo, steps=60, seed=5, faults=[straggler(topo, 5, 1.4)])
    truth = job.ground_truth()
    log = tmp_path / "detect.log"

    def incidents() -> list[Incident]:
        return [decode_as(Incident, v) for v in _read(settings, topics.incidents)]

    wait_topics_visible(settings, (topics.steps, topics.jobs, topics.detect_partials, topics.incidents))
    worker = _start(settings, log)
    try:
        _wait_for(lambda: "Ready" in log.read_text(errors="replace"), 120, "detect to start")
        steps = list(job.iter_steps())
        start, end = job.job_events()
        with BackgroundEmitter(
            KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer")),
            topics) as emitter:
            emitter.emit(start)
            for events in steps[:30]:
                for event in events:
                    emitter.emit(event)
            assert emitter.flush(timeout=60)
            _wait_for(lambda: any(i.state == "open" for i in incidents()), 120, "the slow rank's incident")
            os.killpg(worker.pid, signal.SIGKILL)  # mid-job: windows and detector state are lost
            worker.wait()
            worker = _start(settings, log)
            _wait_for(lambda: log.read_text(errors="replace").count("Ready") >= 2, 120, "detect to restart")
            for events in steps[30:]:
                for event in events:
                    emitter.emit(event)
            emitter.emit(end)
            assert emitter.flush(timeout=60)
            assert emitter.stats().dropped_total == 0

        def all_resolved() -> bool:
            found = incidents()
            return bool(found) and all(i.state == "resolved" for i in _latest(found).values())

        _wait_for(all_resolved, 180, "every incident to be resolved")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(60)

    found = incidents()
    for state in ("open", "resolved"):  # a consumer pages once per incident
        ids = [i.incident_id for i in found if i.state == state]
        assert sorted(ids) == sorted({i.incident_id for i in found}), f"one {state} per incident: {ids}"
    latest = _latest(found)
    slow_rank = [i for i in latest.values() if i.rule == "SLOW_RANK"]
    assert {r for i in slow_rank for r in i.ranks} == truth.slow_ranks() == {5}
    assert len(slow_rank) == 1, f"duplicate incidents for one fault: {sorted(latest)}"
    commands = [decode_as(ControlCommand, v) for v in _read(settings, topics.control)]
    assert [(c.action, c.ranks, c.incident_id) for c in commands] == [
        ("profile_on", [5], slow_rank[0].incident_id)]
    assert "restored" in log.read_text(errors="replace")  # the engine resumed from its snapshots


def _latest(found: list[Incident]) -> dict[str, Incident]:
    latest: dict[str, Incident] = {}
    for incident in found:  # per job one partition: topic order is publication order
        latest[incident.incident_id] = incident
    return latest
