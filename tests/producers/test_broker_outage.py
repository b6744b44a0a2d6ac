"""The real broker stops and restarts while a producer keeps emitting: every event arrives once.

Uses the default spool (`spool_root`: $STEPLENS_HOME/spool/<name>) exactly as the simulator and
the demo do; the broker is the session's own (infra/, this helper's ports), stopped and started again.
The exporter retries in place (KafkaExporter's default), so a batch the broker wrote before it
stopped, unacknowledged, is not written twice; newer events wait in the spool meanwhile.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from infra.launcher import InfraConfig, KafkaBroker
from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import ExportError, OutRecord
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics, encode, job_key, rank_key
from tests.producers.test_kafka_integration import create_topics, exporter_for, read_all

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.exclusive]


def test_events_emitted_across_a_broker_restart_are_not_lost(
    kafka_settings: Settings, infra_config: InfraConfig, unique_name: str, tmp_path: Path,
) -> None:
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    job = FleetJob(unique_name, Topology(dp=4, tp=2, pp=2), 120, [], seed=1)
    events = [e for step in job.iter_steps() for e in step]
    emitter = BackgroundEmitter(exporter_for(kafka_settings, export_timeout_s=3.0), topics, name=unique_name,
                                flush_interval_s=0.05, retry_backoff_max_s=1.0, spool_root=tmp_path / "spool")
    assert emitter.spool_dir == tmp_path / "spool" / unique_name
    broker = KafkaBroker(infra_config)
    # a second exporter, connected before the outage, whose export is aborted during it
    held = exporter_for(kafka_settings)
    start, _ = job.job_events()
    held.export([OutRecord(topics.jobs, job_key(job.job_id), encode(start))])
    aborted: list[BaseException] = []
    third = len(events) // 3
    try:
        for ev in events[:third]:
            assert emitter.emit(ev)
        assert emitter.flush(60)
        broker.stop()
        late = OutRecord(topics.jobs, job_key(job.job_id), encode(start))

        def export_held() -> None:
            try:
                held.export([late])
            except ExportError as exc:
                aborted.append(exc)

        waiting = threading.Thread(target=export_held, daemon=True)
        waiting.start()
        for ev in events[third:2 * third]:  # while the broker is away
            assert emitter.emit(ev)
        # the emitter's export stalled (2 s) and the newer events went to the spool
        assert emitter.wait_until(lambda s: not s.healthy and s.spooled > 0, 60), emitter.stats()
        assert waiting.is_alive(), f"the in-place export returned while the broker was away: {aborted}"
        held.abort()
        waiting.join(30)
        assert not waiting.is_alive() and len(aborted) == 1
        failed = getattr(aborted[0], "failed", None)
        assert failed == (late,), failed  # the record it held, for the caller to spool
    finally:
        broker.start(timeout=120)
        held.close()
    for ev in events[2 * third:]:
        assert emitter.emit(ev)
    assert emitter.flush(120), emitter.stats()
    stats = emitter.stats()
    assert emitter.close(timeout=30)
    assert stats.dropped == {} and stats.pending == 0 and stats.spooled > 0
    got = read_all(kafka_settings, [topics.steps], len(events))
    # exactly once and, per rank (one key, one partition), in the order emitted
    assert len(got) == len(events), f"{len(got) - len(events)} copies beyond the {len(events)} events"
    want: dict[bytes | None, list[bytes]] = {}
    for ev in events:
        want.setdefault(rank_key(job.job_id, ev.rank), []).append(encode(ev))
    have: dict[bytes | None, list[bytes]] = {}
    for _, key, value in got:
        have.setdefault(key, []).append(value)
    assert have == want
