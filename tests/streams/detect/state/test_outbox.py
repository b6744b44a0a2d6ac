"""The detect outbox: outputs in the snapshot before they are sent, read back after a crash, sent once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from infra.clients import kafka_client_config
from infra.settings import Settings, load_settings
from schemas import ControlCommand, Incident, Topics
from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from streams.detect.state.outbox import HEADER, Outbox, output_id, scan_start
from streams.detect.state.store import SnapshotStore, decode, decode_snapshot, encode
from streams.topics_admin import DetectTopics, ensure_topics
from tests.streams.helpers import T0, wait_topics_visible


def _incident(job: str, state: str, step: int) -> Incident:
    return Incident(incident_id=f"SLOW_RANK:{job}:rank:5:s3", job=job, rule="SLOW_RANK", state=state,  # type: ignore[arg-type]
                    severity="warning", scope="rank", summary="rank 5", detected_ns=T0 + step, ranks=[5],
                    step_first=3, step_last=step)


def _command(job: str) -> ControlCommand:
    return ControlCommand(command_id=f"profile:SLOW_RANK:{job}:rank:5:s3", job=job, action="profile_on", ranks=[5],
                          step_first=6, step_count=5, issued_ns=T0)


def test_outbox_numbers_outputs_per_job_and_keeps_the_earliest_scan_position() -> None:
    box = Outbox("j")
    box.add([_incident("j", "open", 5), _command("j")], {("inc", 0): 10})
    box.add([_incident("j", "update", 25)], {("inc", 0): 12})  # still pending: the earlier position holds
    assert [oid for oid, _ in box.take()] == [output_id("j", 1), output_id("j", 2), output_id("j", 3)]
    assert scan_start([box, Outbox("empty")]) == {("inc", 0): 10}
    assert box.drop_delivered({output_id("j", 1), output_id("other", 2)}) == 1
    assert [seq for seq, _ in box.pending] == [2, 3]
    box.sent()
    assert not box.pending and scan_start([box]) == {}
    box.add([_incident("j", "resolved", 30)], {("inc", 0): 14})
    assert box.take()[0][0] == output_id("j", 4)  # numbering continues: ids never repeat
    assert scan_start([box]) == {("inc", 0): 14}


def test_snapshot_carries_engine_and_outbox() -> None:
    engine = JobEngine.create("j", DetectionConfig())
    box = Outbox("j")
    box.add([_incident("j", "open", 5)], {("inc", 1): 7})
    snap = decode_snapshot(encode(engine, box))
    assert snap is not None
    assert snap[0].job == "j" and snap[1].pending == box.pending and snap[1].scan_from == {("inc", 1): 7}
    assert decode(encode(engine)) is not None  # an engine alone gets an empty outbox
    assert decode_snapshot(b"SLS1whatever") is None  # an older format is ignored (the job starts afresh)


@pytest.mark.integration
@pytest.mark.kafka
def test_a_restored_outbox_sends_only_what_never_reached_the_topics(
        kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    s = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
                secrets_dir=kafka_settings.secrets_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                topic_partitions=2)
    topics = Topics(s.topic_prefix)
    ensure_topics(s, topics, s.topic_partitions)
    wait_topics_visible(s, (topics.incidents, topics.control, topics.detect_state))
    store = SnapshotStore(s, DetectTopics(s.topic_prefix).state)
    names = [topics.incidents, topics.control]
    out_topics: dict[type, str] = {Incident: topics.incidents, ControlCommand: topics.control}
    try:
        # another job's outputs already on the topics (ids must not be confused)
        other = Outbox("other")
        other.add([_incident("other", "open", 5)], {})
        store.send_outputs(out_topics, other.take())
        known = store.end_offsets(names)
        box = Outbox("j")
        box.add([_incident("j", "open", 5), _command("j"), _incident("j", "update", 25)], known)
        store.write({"j": encode(JobEngine.create("j", DetectionConfig()), box)})  # snapshot first
        after = store.send_outputs(out_topics, box.take()[:2])  # then the kill: 2 of 3 sent
        assert all(offset > known.get(pos, 0) for pos, offset in after.items())

        engine, restored = store.load()["j"]
        assert engine.job == "j" and len(restored.pending) == 3
        delivered = store.delivered(names, scan_start([restored]))
        assert restored.drop_delivered(delivered) == 2
        assert [item for _, item in restored.take()] == [_incident("j", "update", 25)]
        store.send_outputs(out_topics, restored.take())
    finally:
        store.close()
    consumer = KafkaConsumer(topics.incidents, topics.control, **kafka_client_config(s, "admin"),
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        ids = [dict(m.headers)[HEADER] for m in consumer]
    finally:
        consumer.close()
    assert sorted(ids) == sorted([output_id("other", 1), output_id("j", 1), output_id("j", 2), output_id("j", 3)])
