"""The demo job through Kafka, the detect and land workers and embedded chdb, read while the land worker
still runs (issue #46: every query exited 3 with "Cannot lock file .../status" until ingestion stopped)."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from kafka import KafkaProducer

from bench.detection.run import wait_caught_up
from infra.clients import kafka_client_config
from infra.settings import REPO_ROOT, Settings
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from sinks.read_endpoint import endpoint_file
from steplens.cli import main
from steplens.demo import build_job, start_worker, stop_worker, write_html_report
from streams.topics_admin import ensure_topics
from tests.sinks.landing import pipeline_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]

README = REPO_ROOT / "README.md"
QUERIES = ("ranks", "hosts", "incidents", "perf", "memory", "offenders", "lost", "health", "report", "timeline")


def readme_queries() -> list[list[str]]:
    """The README's `steplens <query>` examples, copied as written (comments cut)."""
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
             for line in block.splitlines()]
    found = [shlex.split(line)[1:] for line in lines if line.startswith("steplens ")]
    # `perf --breakdown` needs stored reference models (`steplens model fit`, a write: not while landing)
    queries = [argv for argv in found if argv and argv[0] in QUERIES and "--breakdown" not in argv]
    assert {argv[0] for argv in queries} == set(QUERIES), queries  # the README still shows every query
    return queries


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
        # the demo's own capacity report (reports/<job>/report.html), the same page
        assert write_html_report(settings, unique_name, tmp_path / "demo.html").stat().st_size > 10_000
        assert main(["migrate"]) == 0  # up to date: a reader writes nothing
        capsys.readouterr()
        monkeypatch.chdir(tmp_path)  # the README's outputs (reports/...) land here, not in the checkout
        for argv in readme_queries():  # as the README writes them, right after the demo: each answers
            assert main(argv) == 0, argv
            out = capsys.readouterr()
            assert out.out.strip() or argv[0] == "timeline", (argv, out.err)  # timeline says on stderr
            assert "Traceback" not in out.err, (argv, out.err)
            if "-o" in argv:
                assert (tmp_path / argv[argv.index("-o") + 1]).stat().st_size > 1_000, argv
    finally:
        producer.close()
        for proc in workers:
            stop_worker(proc)
    assert not endpoint_file(store).exists()  # the worker withdrew its announcement when it stopped
