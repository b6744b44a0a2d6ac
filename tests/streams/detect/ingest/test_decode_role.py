"""The decode stage as workers of its own (`--role decode`, `detect_runs_decode = false`): a straggler is still
found, the two decode workers share the input's partitions, each serves its own metrics, and SIGTERM stops them
cleanly. Real broker; the detect worker and two decode workers as subprocesses."""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from infra.clients import kafka_client_config
from infra.scrape_targets import target_file_name
from infra.settings import Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics
from steplens.demo import start_worker, stop_worker
from streams.detect.ingest.loop import decode_group
from streams.topics_admin import ensure_topics
from tests.streams.helpers import alerts_topic

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TIMEOUT_S = 240.0
SLOW_RANK = 6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _wait_members(s: Settings, group: str, members: int, deadline: float, workers: list[Any]) -> None:
    """Until `group` is stable with `members` members: input sent before the second joins may all go to the
    first (a small job is decoded in one batch), and the test would say nothing about sharing."""
    admin = KafkaAdminClient(**kafka_client_config(s, "admin"))
    try:
        while True:
            desc = admin.describe_groups([group]).get(group, {})
            if desc.get("group_state") == "Stable" and len(desc.get("members") or []) == members:
                return
            assert all(w.poll() is None for w in workers), "a worker died"
            assert time.monotonic() < deadline, f"group {group} never had {members} members: {desc}"
            time.sleep(0.5)
    finally:
        admin.close()


def test_the_settings_default_to_the_detect_worker_running_decode() -> None:
    assert load_settings(env={}).detect_runs_decode is True
    assert load_settings(env={"STEPLENS_DETECT_RUNS_DECODE": "false"}).detect_runs_decode is False


def test_decode_workers_of_their_own_feed_the_engine(kafka_settings: Settings, unique_name: str,
                                                     tmp_path: Path) -> None:
    s = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                topic_partitions=4)
    ensure_topics(s, Topics(s.topic_prefix), s.topic_partitions)
    env = {**os.environ, "STEPLENS_HOME": str(s.home), "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": s.topic_prefix, "STEPLENS_APP_ID": s.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
           "STEPLENS_DETECT_RUNS_DECODE": "false", "STEPLENS_METRICS_TARGETS_DIR": str(tmp_path / "targets")}
    ports = [_free_port(), _free_port()]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    workers = [start_worker("detect", env, s.home)]
    workers += [start_worker("decode", {**env, "STEPLENS_DECODE_METRICS_PORT": str(port)}, tmp_path / name)
                for port, name in zip(ports, ("a", "b"), strict=True)]
    _wait_members(s, decode_group(s), 2, time.monotonic() + TIMEOUT_S, workers)
    topo = Topology(dp=8, tp=2, pp=1)  # 16 ranks keyed apart: both members' partitions get some (p ~ 1 - 2^-15)
    job = FleetJob("decode-role-job", topo, steps=60, seed=3, faults=[straggler(topo, SLOW_RANK, 1.4, start=20)])
    try:
        exporter = KafkaExporter(s.kafka_bootstrap, extra_config=kafka_client_config(s, "producer"))
        with BackgroundEmitter(exporter, Topics(s.topic_prefix)) as emitter:
            start, end = job.job_events()
            for event in [start, *(e for events in job.iter_steps() for e in events), end]:
                assert emitter.emit(event)
            assert emitter.flush(timeout=60)
        deadline = time.monotonic() + TIMEOUT_S
        while not any(a.rule == "SLOW_RANK" for a in alerts_topic(s)):
            assert all(w.poll() is None for w in workers), "a worker died"
            assert time.monotonic() < deadline, "no SLOW_RANK from the decode workers' chunks"
            time.sleep(1.0)
        # both decode workers took part: the group split the input's partitions between them
        counts = [_metric(port, "steplens_detect_events_in_total") for port in ports]
        assert all(c > 0 for c in counts), counts
        assert sorted(p.name for p in (tmp_path / "targets").iterdir()) == sorted(
            f"{target_file_name('decode', socket.gethostname(), port)}.json" for port in ports)
    finally:
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0, 0]
    slow = [a for a in alerts_topic(s) if a.rule == "SLOW_RANK" and a.state == "open"]
    assert [a.ranks for a in slow] == [[SLOW_RANK]]
    assert not list((tmp_path / "targets").iterdir()), "a cleanly stopped worker removes its scrape target"
