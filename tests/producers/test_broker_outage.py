"""The real broker stops and restarts while a producer keeps emitting: every event arrives.

Uses the default spool ($STEPLENS_HOME/spool/<name>) exactly as the simulator and the demo
do; the broker is the session's own (infra/, this helper's ports), stopped and started again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import InfraConfig, KafkaBroker
from producers.emitter import BackgroundEmitter
from producers.simulator.cluster import SimulatedJob
from producers.simulator.topology import Topology
from schemas import Topics, encode
from steplens.config import Settings
from tests.producers.test_kafka_integration import create_topics, exporter_for, read_all

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def test_events_emitted_across_a_broker_restart_are_not_lost(
    kafka_settings: Settings, infra_config: InfraConfig, unique_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    topics = Topics(f"{unique_name}.")
    create_topics(kafka_settings, topics)
    job = SimulatedJob(unique_name, Topology(dp=4, tp=2, pp=2), 120, [], seed=1)
    events = [e for step in job.iter_steps() for e in step]
    emitter = BackgroundEmitter(exporter_for(kafka_settings, export_timeout_s=3.0), topics, name=unique_name,
                                flush_interval_s=0.05, retry_backoff_max_s=1.0)
    assert emitter.spool_dir == tmp_path / "spool" / unique_name
    broker = KafkaBroker(infra_config)
    third = len(events) // 3
    try:
        for ev in events[:third]:
            assert emitter.emit(ev)
        assert emitter.flush(60)
        broker.stop()
        for ev in events[third:2 * third]:  # while the broker is away
            assert emitter.emit(ev)
        assert emitter.wait_until(lambda s: not s.healthy and s.spooled > 0, 60), emitter.stats()
    finally:
        broker.start(timeout=120)
    for ev in events[2 * third:]:
        assert emitter.emit(ev)
    assert emitter.flush(120), emitter.stats()
    stats = emitter.stats()
    assert emitter.close(timeout=30)
    assert stats.dropped == {} and stats.pending == 0 and stats.spooled > 0
    got = read_all(kafka_settings, [topics.steps], stats.exported)
    assert {value for _, _, value in got} == {encode(e) for e in events}  # nothing lost (resends allowed)
