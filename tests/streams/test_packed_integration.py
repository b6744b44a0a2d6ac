"""Contract 1.2 end to end: packed records (one host's events per topic per step) through the real
broker, the detect and land workers and embedded ClickHouse, beside the same scenario unpacked.

Detection is judged against the simulator's ground truth, the same way for both forms; landing
must hold every event exactly once; a packed record with one bad element dead-letters exactly
that element (its index in the reason, the record's offset as source) and lands its siblings.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer

from bench.detection.run import read_alerts, run_record, score_records, wait_caught_up, wait_jobs_finished
from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics, encode
from sinks import open_backend
from steplens.demo import start_worker, stop_worker
from steplens.lag import end_offsets
from streams.topics_admin import ensure_topics
from tests.streams.helpers import step_event

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]


def test_packed_records_land_and_are_detected_like_unpacked_ones(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    settings = replace(kafka_settings, home=tmp_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                       topic_partitions=2, clickhouse_url="", chdb_path=tmp_path / "chdb")
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    runs = {form: SimRun(scenario_job("slow_host", ranks=64, steps=40, seed=1, job_id=f"{unique_name}-{form}"),
                         packed=form == "packed") for form in ("packed", "unpacked")}
    env = {**os.environ, "STEPLENS_HOME": str(tmp_path), "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
           "STEPLENS_TOPIC_PARTITIONS": "2", "STEPLENS_CLICKHOUSE_URL": "",
           "STEPLENS_CHDB_PATH": str(tmp_path / "chdb"), "STEPLENS_SECRETS_DIR": str(settings.secrets_path)}
    alert_start = end_offsets(settings, topics.incidents)
    bad_job = f"{unique_name}-bad"
    good = [encode(step_event(r, 0, 400.0, job=bad_job)) for r in range(3)]
    bad = encode(step_event(1, 0, 400.0, job=bad_job)).replace(b'"rank":1', b'"rank":99')
    mixed = b"[" + b",".join([good[0], bad, good[1], good[2]]) + b"]"
    workers = [start_worker(role, env, tmp_path) for role in ("detect", "land")]
    producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all", linger_ms=5,
                             batch_size=1 << 20, max_request_size=2 << 20)
    try:
        stream_runs(list(runs.values()), topics, lambda t, k, v: producer.send(t, key=k, value=v))
        mixed_at = producer.send(topics.steps, key=f"{bad_job}/node-0".encode(), value=mixed).get(timeout=60)
        whole_at = producer.send(topics.steps, key=b"x", value=b"[]").get(timeout=60)
        producer.send(topics.device, key=b"x", value=b"42").get(timeout=60)
        producer.flush()
        wait_caught_up(settings, workers, 180)
        unfinished = wait_jobs_finished(settings, {r.job.job_id for r in runs.values()}, 60)
    finally:
        producer.close()
        for proc in workers:
            stop_worker(proc)
    assert not unfinished, (unfinished, _worker_log(tmp_path / "worker-detect.log"))
    assert runs["packed"].records < runs["unpacked"].records / 4
    assert runs["packed"].events == runs["unpacked"].events

    # detection: both forms scored against the ground truth, identically
    jobs = {r.job.job_id for r in runs.values()}
    alerts = read_alerts(settings, topics.incidents, alert_start, jobs)
    result = {form: score_records([run_record("slow_host", run)], alerts)["scenarios"]["slow_host"]
              for form, run in runs.items()}
    for form in runs:
        assert (result[form]["recall"], result[form]["precision"], result[form]["localisation"]) == (1.0, 1.0, 1.0), \
            (form, result[form], _worker_log(tmp_path / "worker-detect.log"))
    assert result["packed"]["rule_attribution"] == result["unpacked"]["rule_attribution"]

    # landing: every event once, the bad element (and only it) dead-lettered with its index
    backend = open_backend(settings)
    try:
        db = backend.database
        for run in runs.values():
            job = run.job.job_id
            assert int(backend.query(f"SELECT count() FROM {db}.steps FINAL WHERE job = '{job}'")[0][0]) \
                == run.rank_steps
            summaries = backend.query(f"SELECT uniqExact(rank, step) FROM {db}.kernel_summaries WHERE job = '{job}'")
            assert int(summaries[0][0]) == run.rank_steps
        landed = backend.query(f"SELECT rank FROM {db}.steps FINAL WHERE job = '{bad_job}' ORDER BY rank")
        assert [int(r[0]) for r in landed] == [0, 1, 2]
    finally:
        backend.close()
    consumer = KafkaConsumer(topics.deadletter, **kafka_client_config(settings, "admin"),
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    letters = list(consumer)
    consumer.close()
    assert len(letters) == 3, [dict(m.headers) for m in letters]
    by_reason = {dict(m.headers)["steplens-reason"].decode(): m for m in letters}
    element = [m for reason, m in by_reason.items() if reason.startswith("[1] ")]
    assert len(element) == 1 and orjson.loads(element[0].value) == orjson.loads(bad)
    headers = dict(element[0].headers)
    assert (int(headers["steplens-source-partition"]), int(headers["steplens-source-offset"])) == \
        (mixed_at.partition, mixed_at.offset)
    whole = [m for m in letters if m.value == b"[]"]
    assert len(whole) == 1 and int(dict(whole[0].headers)["steplens-source-offset"]) == whole_at.offset
    assert any(m.value == b"42" for m in letters)


def _worker_log(path: Path) -> str:
    """What the detect worker said about incidents and its jobs: the evidence when scoring fails."""
    keep = ("incident", "detect jobs", "finished:", "ERROR", "Traceback", "Revoking", "assigned partitions",
            "Signal received")
    lines = [line[:240] for line in path.read_text(errors="replace").splitlines() if any(k in line for k in keep)]
    return "\n".join(lines[-40:])
