"""Packed records (contract 1.2) through the real broker: every event once, in order per rank, across an outage.

The emitter packs each export round per (topic, key); these tests read the records back with a
plain consumer, expand the arrays and validate every element as an event, as pack5's consumers do.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.sampler.ranks import register_device
from producers.sampler.sampler import NodeSampler
from producers.sampler.sources import HostSource
from schemas import DeviceSample, JobEvent, StepEvent, Topics, rank_key
from tests.producers._records import events_of, is_packed
from tests.producers.test_kafka_integration import Switchable, create_topics, exporter_for, read_all, small_job

pytestmark = [pytest.mark.kafka, pytest.mark.integration]


def test_packed_events_reach_kafka_exactly_once_in_order_across_an_outage(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    job = small_job(unique_name)
    total = job.world * job.steps + 2
    exporter = Switchable(exporter_for(kafka_settings))
    exporter.down = False
    emitter = BackgroundEmitter(exporter, topics, batch_size=64, flush_interval_s=0.01, spool_dir=tmp_path,
                                retry_backoff_s=0.01, retry_backoff_max_s=0.05, pack=True)
    steps = list(job.iter_steps())
    start, end = job.job_events()
    emitter.emit(start)
    half = len(steps) // 2
    for events in steps[:half]:
        emitter.emit_batch(events)
    assert emitter.flush(60.0), emitter.stats()
    exporter.down = True  # the outage: what follows goes to the spool, per event
    for events in steps[half:]:
        emitter.emit_batch(events)
    emitter.emit(end)
    assert emitter.wait_until(lambda s: s.spool_pending == total - s.exported and s.queued == 0
                              and s.in_flight == 0, 30.0), emitter.stats()
    exporter.down = False
    assert emitter.flush(60.0), emitter.stats()
    stats = emitter.stats()
    assert emitter.close(timeout=30.0)
    assert stats.dropped == {} and stats.exported == total and stats.replayed == stats.spooled > 0
    assert stats.records_sent < total / 4  # 8 ranks x 64-event rounds: far fewer records than events

    got = read_all(kafka_settings, [topics.steps, topics.jobs], stats.records_sent)
    assert len(got) == stats.records_sent  # no record twice (read_all polls once more for extras)
    per_rank: dict[int, list[int]] = {}
    jobs: list[str] = []
    for topic, key, value in got:  # read_all keeps each partition's offset order
        if topic == topics.jobs:
            assert not is_packed(value)  # `jobs` stays one object per record
            (ev,) = events_of(value)
            assert isinstance(ev, JobEvent)
            jobs.append(ev.phase)
            continue
        evs = events_of(value)
        assert all(isinstance(e, StepEvent) and key == rank_key(job.job_id, e.rank) for e in evs)
        for e in evs:
            assert isinstance(e, StepEvent)
            per_rank.setdefault(e.rank, []).append(e.step)
    assert sorted(jobs) == ["end", "start"]
    assert per_rank == {r: list(range(job.steps)) for r in range(job.world)}  # once each, in order per rank
    assert any(is_packed(v) for t, _, v in got if t == topics.steps)


def test_node_sampler_sends_one_packed_record_per_tick_keyed_by_host(
    kafka_settings: Settings, unique_name: str, tmp_path: Path
) -> None:
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    for dev in range(3):
        register_device(tmp_path / "run", dev, "job-a", dev)
    emitter = BackgroundEmitter(exporter_for(kafka_settings), topics, spool_dir=None, pack=True)
    sampler = NodeSampler(HostSource(), emitter, "node-7", tmp_path / "run", interval_s=0.01)
    ticks = 4
    for _ in range(ticks):
        sampler.tick()
        assert emitter.flush(30.0)  # each tick is its own send round, as at a 1 s interval
    stats = emitter.stats()
    assert emitter.close(timeout=30.0)
    assert stats.exported == 3 * ticks and stats.records_sent == ticks and stats.dropped == {}
    got = read_all(kafka_settings, [topics.device], ticks)
    assert len(got) == ticks and {key for _, key, _ in got} == {b"node-7"}
    per_tick = [events_of(value) for _, _, value in got]
    for samples in per_tick:
        assert all(isinstance(s, DeviceSample) for s in samples)
        assert [(s.device, s.rank) for s in samples if isinstance(s, DeviceSample)] == [(0, 0), (1, 1), (2, 2)]
        assert len({s.ts_ns for s in samples if isinstance(s, DeviceSample)}) == 1  # one tick per record
    assert Counter(len(s) for s in per_tick) == {3: ticks}
