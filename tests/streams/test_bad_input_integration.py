"""Malformed messages on every topic the workers read: nothing lost, nothing crashes.

Real Kafka, embedded chdb, both Faust workers as subprocesses (as deployed). Valid events
and malformed ones (a tombstone, garbage, non-UTF-8, bad versions, out-of-range numbers,
deep nesting, a 2 MB message, empty hosts, the wrong type for the topic) go to each of the
land worker's eight topics, and garbage to detect's internal topics too. Afterwards every
valid steps/jobs/incidents event is a row exactly once (with and without FINAL), every
malformed message is in the dead_letters table and on the dead-letter topic (same source
topic, partition and offset), and both workers were still alive to be stopped cleanly.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer

from infra.clients import kafka_client_config
from infra.settings import Settings, load_settings
from schemas import Topics, decode, encode
from sinks.backend import qualified
from sinks.embedded import EmbeddedBackend
from sinks.rows import rows_for
from steplens.demo import start_worker, stop_worker, wait_caught_up
from streams.land.processor import landing_types
from streams.topics_admin import ensure_topics
from tests.sinks.samples import incident, job
from tests.streams.helpers import step_event

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.clickhouse]

JOB = "bad-input-job"
DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
Sent = tuple[str, int, int]  # topic, partition, offset


def _doc_examples() -> dict[str, dict[str, Any]]:
    examples = [orjson.loads(b) for b in re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)]
    by_type: dict[str, dict[str, Any]] = {}
    for example in examples:
        by_type.setdefault(example["type"], {**example, "job": JOB})
    return by_type


def _valid(topics: Topics) -> dict[str, list[bytes]]:
    """Valid events per topic: several for the stored types, the docs example for the others."""
    examples = _doc_examples()
    out: dict[str, list[bytes]] = {}
    for topic, cls in landing_types(topics).items():
        out[topic] = [orjson.dumps(examples[cls.TYPE])]
    out[topics.steps] = [encode(step_event(rank, s, 400.0, job=JOB)) for rank in range(3) for s in range(2)]
    out[topics.jobs] = [encode(job(job=JOB, phase="start")), encode(job(job=JOB, phase="end", last_step=1))]
    out[topics.incidents] = [encode(incident(job=JOB, incident_id=f"inc-{n}")) for n in range(2)]
    return out


def _malformed(good: bytes, other_type: bytes) -> list[bytes | None]:
    base = orjson.loads(good)
    return [
        None,  # a tombstone
        b"\x00not json",
        good[:10] + b"\xff\xfe" + good[10:],  # not UTF-8
        orjson.dumps({**base, "v": "1.\u00b2"}),
        orjson.dumps({**base, "v": "1." + "9" * 5_000}),
        _out_of_range(base),
        b"[" * 3_000 + b"]" * 3_000,
        orjson.dumps({**base, "pad": "x" * 2_097_152}),  # 2 MB
        orjson.dumps({**base, "host": ""}) if "host" in base else orjson.dumps({**base, "job": ""}),
        other_type,
    ]


def _out_of_range(base: dict[str, Any]) -> bytes:
    """The event with its timestamp at 2**64 - 1 (valid JSON, beyond every Int64 column)."""
    name = next(n for n in ("end_ns", "ts_ns", "detected_ns", "issued_ns", "at_ns", "step") if n in base)
    return orjson.dumps({**base, name: 0}).replace(f'"{name}":0'.encode(), f'"{name}":{2**64 - 1}'.encode(), 1)


@pytest.fixture
def bad_input_settings(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> Settings:
    return replace(
        load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap, clickhouse_url="",
        secrets_dir=kafka_settings.secrets_path,
        topic_prefix=f"{unique_name}.", app_id=unique_name, topic_partitions=2, sink_batch_seconds=0.5,
    )


def _read_all(settings: Settings, topic: str) -> list[Any]:
    consumer = KafkaConsumer(topic, **kafka_client_config(settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5_000, fetch_max_bytes=16_777_216,
                             max_partition_fetch_bytes=8_388_608)
    try:
        return list(consumer)
    finally:
        consumer.close()


def test_every_malformed_message_is_dead_lettered_and_every_valid_one_lands_once(
    bad_input_settings: Settings,
) -> None:
    settings = bad_input_settings
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    valid = _valid(topics)
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_CLICKHOUSE_URL": "", "STEPLENS_TOPIC_PREFIX": settings.topic_prefix,
           "STEPLENS_APP_ID": settings.app_id, "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions),
           "STEPLENS_SINK_BATCH_SECONDS": "0.5", "STEPLENS_SECRETS_DIR": str(settings.secrets_path)}
    workers = [start_worker(role, env, settings.home) for role in ("detect", "land")]
    good_sent: dict[Sent, bytes] = {}
    bad_sent: dict[Sent, bytes | None] = {}
    try:
        producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all", max_request_size=4_194_304)
        wrong = encode(step_event(0, 0, 400.0, job=JOB))
        for topic, events in valid.items():
            other = wrong if topic != topics.steps else valid[topics.jobs][0]
            for n, raw in enumerate([*events, *_malformed(events[0], other)]):
                meta = producer.send(topic, key=f"{JOB}/{n}".encode(), value=raw).get(timeout=60)
                where = (topic, meta.partition, meta.offset)
                if n < len(events) and raw is not None:
                    good_sent[where] = raw
                else:
                    bad_sent[where] = raw
        for topic in (topics.detect_partials, topics.detect_state):  # detect's internal topics
            for raw in (None, b"garbage", b'{"kind":"group_step"}', b"[]", orjson.dumps({"job": 1})):
                producer.send(topic, key=b"k", value=raw).get(timeout=60)
        producer.flush()
        producer.close()
        wait_caught_up(settings, workers, lambda: None)  # raises if a worker exited
        assert [proc.poll() for proc in workers] == [None, None], "both workers must survive bad input"
    finally:
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0], "workers must shut down cleanly"

    backend = EmbeddedBackend(settings.embedded_path, settings.clickhouse_database)
    try:
        db = backend.database
        params = {"job": JOB}
        steps = backend.query(f"SELECT rank, step FROM {qualified(db, 'steps')} WHERE job = %(job)s", params)
        steps_final = backend.query(f"SELECT rank, step FROM {qualified(db, 'steps')} FINAL WHERE job = %(job)s",
                                    params)
        jobs = backend.query(f"SELECT phase FROM {qualified(db, 'jobs')} FINAL WHERE job = %(job)s", params)
        incidents = backend.query(
            f"SELECT incident_id FROM {qualified(db, 'incidents')} FINAL WHERE job = %(job)s", params
        )
        letters = backend.query(
            f"SELECT topic, `partition`, `offset`, field, reason, payload_bytes FROM {qualified(db, 'dead_letters')} "
            "WHERE startsWith(topic, %(prefix)s)", {"prefix": settings.topic_prefix},
        )
    finally:
        backend.close()

    # every valid steps/jobs/incidents event landed exactly once
    assert sorted(steps) == sorted(steps_final) == sorted((r, s) for r in range(3) for s in range(2))
    assert sorted(p for (p,) in jobs) == ["end", "start"]
    assert sorted(i for (i,) in incidents) == ["inc-0", "inc-1"]

    # every malformed message is a dead letter, with a reason; valid ones are not, unless their
    # type has no table yet (then dead-lettered saying so, until its table is added)
    table: dict[Sent, tuple[str, str]] = {(t, p, o): (f, r) for t, p, o, f, r, _ in letters}
    assert len(table) == len(letters), "a message was dead-lettered twice"
    assert set(bad_sent) <= set(table)
    assert all(reason for _, reason in table.values())
    tombstones = [where for where, raw in bad_sent.items() if raw is None]
    assert len(tombstones) == len(landing_types(topics))
    assert all("tombstone" in table[where][1] for where in tombstones)
    for where, raw in good_sent.items():  # every event type has a table: no valid message is a dead letter
        assert rows_for(decode(raw), 1)
        assert where not in table

    # the dead-letter topic holds the same messages, byte for byte, with their source
    on_topic: dict[Sent, Any] = {}
    for message in _read_all(settings, topics.deadletter):
        headers = dict(message.headers)
        where = (headers["steplens-source-topic"].decode(), int(headers["steplens-source-partition"]),
                 int(headers["steplens-source-offset"]))
        on_topic[where] = message
    assert set(on_topic) == set(table)
    for where, raw in bad_sent.items():
        message = on_topic[where]
        assert message.value == (raw if raw is not None else b"")
        assert (("steplens-tombstone", b"1") in message.headers) == (raw is None)
