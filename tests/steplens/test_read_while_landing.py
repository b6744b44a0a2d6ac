"""The demo job through Kafka, the detect and land workers and embedded chdb, read while the land worker
still runs (issue #46: every query exited 3 with "Cannot lock file .../status" until ingestion stopped)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from kafka import KafkaProducer

from bench.detection.run import wait_caught_up
from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from sinks.read_endpoint import endpoint_file
from steplens.cli import main
from steplens.demo import build_job, start_worker, stop_worker
from streams.topics_admin import ensure_topics
from tests.sinks.landing import pipeline_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]


def test_the_cli_and_the_report_read_the_embedded_store_while_the_land_worker_runs(
        kafka_settings: Settings, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "chdb"
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2, clickhouse_url="", chdb_path=store)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    env = pipeline_env(settings, tmp_path, store)
    for name in ("STEPLENS_CONFIG",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(store))
    job = build_job(unique_name, steps=60, seed=7)
    workers = [start_worker(role, env, tmp_path) for role in ("detect", "land")]
    producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all", linger_ms=5,
                             batch_size=1 << 20, max_request_size=2 << 20)
    try:
        stream_runs([SimRun(job)], topics, lambda t, k, v: producer.send(t, key=k, value=v))
        producer.flush()
        wait_caught_up(settings, workers, 240)
        assert all(w.poll() is None for w in workers), "a worker exited"
        assert endpoint_file(store).exists(), (tmp_path / "worker-land.log").read_text(errors="replace")[-3000:]
        # the land worker still runs and owns the store: read it
        assert main(["ranks", "--job", unique_name, "--since", "1h", "--format", "json"]) == 0
        ranks = orjson.loads(capsys.readouterr().out)
        assert ranks[0]["rank"] == 37  # the demo's straggler
        assert main(["incidents", "--job", unique_name, "--format", "json"]) == 0
        incidents = orjson.loads(capsys.readouterr().out)
        assert any(37 in i["ranks"] for i in incidents), incidents  # the straggler, named by an incident
        report = tmp_path / "report.html"
        assert main(["report", "--job", unique_name, "-o", str(report)]) == 0
        assert report.stat().st_size > 10_000
        assert main(["perf", "--job", unique_name]) == 0
        assert main(["migrate"]) == 0  # up to date: a reader writes nothing
    finally:
        producer.close()
        for proc in workers:
            stop_worker(proc)
    assert not endpoint_file(store).exists()  # the worker withdrew its announcement when it stopped
