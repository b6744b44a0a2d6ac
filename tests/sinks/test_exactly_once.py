"""Landing exactly once: replayed Kafka offsets and a ClickHouse outage, on the real services.

Replay: every event type of the test fleet (plus a malformed message) goes through real
Kafka topics, is consumed from the beginning and landed through the land worker's pure
half (LandingProcessor) and the BatchingWriter with per-partition deduplication tokens;
then the same offsets are consumed and landed again. On chdb (26.x honours insert
deduplication tokens) every table, rollups included, is unchanged; on the 18.16 server
(no tokens) the raw tables are unchanged under FINAL and the rollups keep their keys
(aggregated values of a replayed block count twice there: documented in docs/cli.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.clients import kafka_client_config
from infra.launcher import ClickHouseServer, InfraConfig
from infra.settings import Settings
from schemas import Topics, encode, rank_key
from sinks.backend import Backend, qualified
from sinks.embedded import EmbeddedBackend
from sinks.lander import ClickHouseLander
from sinks.migrations.runner import migrate
from sinks.rows import TABLE_COLUMNS, rows_for
from sinks.server import ServerBackend
from sinks.writer import BatchingWriter
from streams.land.processor import Landed, LandingProcessor
from streams.topics_admin import ensure_topics
from tests.steplens.fleet_data import T0, all_events, step_events

ROLLUPS = {
    "steps_by_minute": ("job", "minute"), "steps_by_step": ("job", "step"),
    "steps_by_rank": ("job", "hour", "rank", "host"), "steps_by_day": ("day", "host", "job"),
    "host_health": ("host", "hour"), "topology": ("job", "rank"),
}
RAW = (*TABLE_COLUMNS, "topology")


def _topic_of(topics: Topics, event: Any) -> str:
    return {
        "step": topics.steps, "job": topics.jobs, "incident": topics.incidents, "kernels": topics.kernels,
        "kernel_summary": topics.kernel_summaries, "device": topics.device, "profile": topics.profiles,
        "control": topics.control, "action": topics.actions,
    }[type(event).TYPE]


def _settings(kafka_settings: Settings, prefix: str) -> Settings:
    return dataclasses.replace(kafka_settings, topic_prefix=prefix, topic_partitions=2)


def _produce(settings: Settings, topics: Topics) -> int:
    ensure_topics(settings, topics, settings.topic_partitions)
    # admin: the fixture also seeds incidents and control, which only the workers may write
    producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
    sent = 0
    for event in all_events():
        job = getattr(event, "job", None) or "fleet"
        producer.send(_topic_of(topics, event), key=rank_key(job, getattr(event, "rank", None) or 0),
                      value=encode(event))
        sent += 1
    producer.send(topics.steps, key=b"bad", value=b'{"type": "step", "v": "1.1", "job": 7}')  # a dead letter
    producer.flush(timeout=60)
    producer.close()
    return sent + 1


def _land_all(settings: Settings, topics: Topics, backend: Backend) -> int:
    """Consume every landed topic from offset 0 to its end and land it; batches: one per partition."""
    processor = LandingProcessor(topics, settings.max_event_bytes)
    consumer = KafkaConsumer(**kafka_client_config(settings, "land"), group_id=None, enable_auto_commit=False)
    parts = [TopicPartition(t, p) for t in processor.topics for p in range(settings.topic_partitions)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    end = consumer.end_offsets(parts)
    writer = BatchingWriter(backend, max_rows=100_000, max_seconds=600.0, max_buffered_rows=1_000_000)
    done: dict[TopicPartition, int] = dict.fromkeys(parts, 0)
    deadline = time.monotonic() + 120
    messages = 0
    while any(done[tp] < end[tp] for tp in parts):
        assert time.monotonic() < deadline, f"consumed {done} of {end}"
        for tp, records in consumer.poll(timeout_ms=1000).items():
            landed = Landed()
            for r in records:
                if r.offset < end[tp]:
                    processor.process(r.topic, r.partition, r.offset, r.key, r.value, T0, landed)
                    messages += 1
                done[tp] = max(done[tp], r.offset + 1)
            for row, source in zip(landed.rows, landed.sources, strict=True):
                writer.add_row(row, source)
    consumer.close()
    writer.flush()
    assert writer.buffered == 0
    return messages


def _counts(backend: Backend, final: bool) -> dict[str, Any]:
    db = backend.database
    out: dict[str, Any] = {}
    for table in RAW:
        if final and table == "dead_letters":  # a plain MergeTree: its key is the message's offset
            sql = f"SELECT uniqExact(topic, `partition`, `offset`) FROM {qualified(db, table)}"
        else:
            sql = f"SELECT count() FROM {qualified(db, table)}{' FINAL' if final else ''}"
        out[table] = backend.query(sql)[0][0]
    for table, keys in ROLLUPS.items():
        cols = ", ".join(keys)
        out[f"{table} keys"] = backend.query(f"SELECT count() FROM (SELECT {cols} FROM {qualified(db, table)} "
                                             f"GROUP BY {cols})")[0][0]
    out["steps_by_minute rows"] = backend.query(
        f"SELECT countMerge(rank_steps) FROM {qualified(db, 'steps_by_minute')}")[0][0]
    return out


@pytest.mark.kafka
@pytest.mark.integration
def test_replaying_the_same_offsets_changes_no_table(
    backend: Backend, kafka_settings: Settings, unique_name: str
) -> None:
    settings = _settings(kafka_settings, f"{unique_name}.")
    topics = Topics(settings.topic_prefix)
    sent = _produce(settings, topics)
    migrate(backend)
    assert _land_all(settings, topics, backend) == sent
    honours = backend.honours_dedup_token()  # type: ignore[attr-defined]
    assert honours == isinstance(backend, EmbeddedBackend)  # chdb 26.x yes, server 18.16 no
    first = _counts(backend, final=True)
    assert first["steps"] == len(step_events("job-a", 0)) * 2 and first["dead_letters"] == 1
    assert all(n > 0 for n in first.values()), first
    raw_first = _counts(backend, final=False) if honours else None

    assert _land_all(settings, topics, backend) == sent  # the same offsets again
    again = _counts(backend, final=True)
    if honours:
        assert again == first
        assert _counts(backend, final=False) == raw_first  # not even a duplicate part: the token dropped it
    else:
        assert {k: v for k, v in again.items() if k != "steps_by_minute rows"} == {
            k: v for k, v in first.items() if k != "steps_by_minute rows"}


@pytest.mark.clickhouse
@pytest.mark.integration
@pytest.mark.exclusive
def test_landing_survives_a_60s_clickhouse_outage(
    clickhouse_server_url: str, infra_config: InfraConfig, unique_name: str
) -> None:
    database = f"steplens_{unique_name}"
    settings = dataclasses.replace(infra_config.client_settings(), clickhouse_url=clickhouse_server_url,
                                   clickhouse_database=database, sink_batch_size=1000)
    lander = ClickHouseLander(settings, max_backoff_s=2.0)
    server = ClickHouseServer(infra_config)
    events = step_events("outage-job", 0)
    rows = [r for e in events[: len(events) // 2] for r in rows_for(e, T0)]
    later = [r for e in events[len(events) // 2:] for r in rows_for(e, T0)]
    sources = [("t", 0, i) for i in range(len(rows))]
    later_sources = [("t", 0, len(rows) + i) for i in range(len(later))]
    sink = ThreadPoolExecutor(max_workers=1)  # the lander's one thread, as the land loop's

    def submit(batch: list[Any], src: list[Any]) -> Any:
        return sink.submit(lander.write, batch, src)

    def wait(cond: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    try:
        submit(rows, sources).result(timeout=120)  # lands while the server is up
        server.stop()
        outage_started = time.monotonic()
        pending = submit(later, later_sources)
        wait(lambda: lander.write_failures > 0, "the write never failed while ClickHouse was down")
        while time.monotonic() - outage_started < 60:  # the outage lasts 60 s; the write must hold on
            assert not pending.done(), "write() returned while ClickHouse was down"
            time.sleep(1.0)
        server.start()
        pending.result(timeout=180)  # resumes and lands once the server is back
    finally:
        server.start()
        sink.submit(lander.close).result(timeout=60)
        sink.shutdown(wait=True)
    with ServerBackend(clickhouse_server_url, database) as check:
        landed = check.query(f"SELECT count(), uniqExact(step, rank) FROM {qualified(database, 'steps')} FINAL")
        check.execute(f"DROP DATABASE IF EXISTS {qualified(database, 'x').split('.')[0]}")
    assert landed == [(len(events), len(events))]  # nothing lost, nothing doubled
