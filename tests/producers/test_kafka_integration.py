"""Against the real broker: a simulated job sent by KafkaExporter + emitter is read back exactly."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import ExportError, KafkaExporter, OutRecord
from producers.simulator.catalogue import gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.run import run_simulation
from producers.simulator.topology import Topology
from schemas import JobEvent, StepEvent, Topics, decode_as, rank_key
from streams.topics_admin import ensure_topics

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

READ_TIMEOUT_S = 60.0


def create_topics(settings: Settings, topics: Topics) -> None:
    """The topics and their ACLs, as the admin principal (the broker does not auto-create)."""
    ensure_topics(settings, topics, 4)


def exporter_for(settings: Settings, **options: Any) -> KafkaExporter:
    return KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer"), **options)


def read_all(settings: Settings, names: Sequence[str], expected: int) -> list[tuple[str, bytes | None, bytes]]:
    """Read every partition of `names` from the start until `expected` messages (or time out)."""
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(n, p) for n in names for p in sorted(consumer.partitions_for_topic(n) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        out: list[tuple[str, bytes | None, bytes]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(out) < expected and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out.extend((tp.topic, m.key, m.value) for m in msgs)
        # One more poll: anything beyond `expected` would be a duplicate.
        for tp, msgs in consumer.poll(timeout_ms=1000).items():
            out.extend((tp.topic, m.key, m.value) for m in msgs)
        return out
    finally:
        consumer.close()


def small_job(job_id: str) -> FleetJob:
    topo = Topology(dp=2, tp=2, pp=2)
    return FleetJob(job_id, topo, 25, [straggler(topo, 5, 1.3), *gc_pauses(topo, [10], 150.0)], seed=5)


def check_delivery(job: FleetJob, topics: Topics, got: list[tuple[str, bytes | None, bytes]]) -> None:
    n_steps = job.world * job.steps
    assert len(got) == n_steps + 2
    steps = [(key, decode_as(StepEvent, value)) for topic, key, value in got if topic == topics.steps]
    jobs = [decode_as(JobEvent, value) for topic, _, value in got if topic == topics.jobs]
    assert len(steps) + len(jobs) == len(got)
    assert sorted((e.step, e.rank) for _, e in steps) == [(s, r) for s in range(job.steps) for r in range(job.world)]
    assert all(k == rank_key(job.job_id, e.rank) for k, e in steps)
    assert sorted(e.phase for e in jobs) == ["end", "start"]


def test_simulated_job_round_trips_through_kafka(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    job = small_job(unique_name)
    emitter = BackgroundEmitter(exporter_for(kafka_settings), topics, spool_dir=tmp_path / "spool")
    stats = run_simulation(job, emitter, flush_timeout=60.0)
    assert emitter.close(timeout=30.0)
    assert stats.dropped == {} and stats.spooled == 0
    assert stats.emitted == stats.exported == job.world * job.steps + 2
    check_delivery(job, topics, read_all(kafka_settings, [topics.steps, topics.jobs], stats.exported))


class Switchable:
    """KafkaExporter behind a switch: `down` simulates an outage without touching the broker."""

    def __init__(self, inner: KafkaExporter) -> None:
        self.inner = inner
        self.down = True

    def export(self, records: Sequence[OutRecord]) -> None:
        if self.down:
            raise ExportError("simulated outage")
        self.inner.export(records)

    def flush(self, timeout: float) -> bool:
        return self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()


def test_spooled_events_reach_kafka_exactly_once_after_an_outage(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    job = small_job(unique_name)
    exporter = Switchable(exporter_for(kafka_settings))
    emitter = BackgroundEmitter(exporter, topics, batch_size=64, flush_interval_s=0.01, spool_dir=tmp_path)
    total = job.world * job.steps + 2
    stats = run_simulation(job, emitter, flush_timeout=0.0)
    assert emitter.wait_until(lambda s: s.spooled == total and s.queued == 0 and s.in_flight == 0, 30.0)
    assert stats.exported == 0
    exporter.down = False
    assert emitter.flush(60.0)
    final = emitter.stats()
    assert emitter.close(timeout=30.0)
    assert final.exported == final.replayed == total and final.dropped == {}
    check_delivery(job, topics, read_all(kafka_settings, [topics.steps, topics.jobs], total))
