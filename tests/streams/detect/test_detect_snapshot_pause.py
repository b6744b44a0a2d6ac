"""A big job's snapshots are spaced so that encoding them takes a bounded share of the detect worker
(streams/detect/app.py `snapshot_pause`); a snapshot with outputs to send is never put off."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import Settings, load_settings
from streams.app import base_app
from streams.detect.app import DetectWorker, snapshot_pause
from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from tests.streams.helpers import AckedStream


def test_a_cheap_snapshot_keeps_the_interval() -> None:
    cfg = DetectionConfig(snapshot_interval_s=1.0, snapshot_max_share=0.02)
    assert snapshot_pause(cfg, 0.001) == 1.0


def test_an_expensive_snapshot_stretches_the_pause_to_its_share() -> None:
    """65 ms of encoding at a 2 % share: the next unforced snapshot 3.25 s later (was 1 s: 6.5 % of a core)."""
    cfg = DetectionConfig(snapshot_interval_s=1.0, snapshot_max_share=0.02, snapshot_interval_max_s=10.0)
    assert snapshot_pause(cfg, 0.065) == pytest.approx(3.25)


def test_the_pause_is_capped_and_a_zero_share_turns_it_off() -> None:
    assert snapshot_pause(DetectionConfig(snapshot_interval_max_s=10.0, snapshot_max_share=0.02), 5.0) == 10.0
    assert snapshot_pause(DetectionConfig(snapshot_interval_s=1.0, snapshot_max_share=0.0), 5.0) == 1.0


@pytest.mark.kafka  # the worker's snapshot store writes to the local broker
def test_the_worker_puts_off_unforced_snapshots_but_never_forced_ones(
        kafka_settings: Settings, tmp_path: Path, unique_name: str) -> None:
    from schemas import Topics
    from streams.topics_admin import ensure_topics

    table = {"snapshot_interval_s": 0.0, "snapshot_max_share": 1e-9,
             "snapshot_interval_max_s": 3600.0}  # any encoding stretches the pause to the cap
    settings = replace(load_settings({}), home=tmp_path, app_id=unique_name, topic_prefix=f"{unique_name}.",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path,
                       detection=table)
    detection = DetectionConfig.of(settings)
    ensure_topics(settings, Topics(settings.topic_prefix), 1)
    worker = DetectWorker(base_app(settings, "detect"), settings)
    worker.stream = AckedStream()
    worker.fleet.jobs["j"] = JobEngine.create("j", detection)

    async def snapshots() -> list[float]:
        written = []
        worker.dirty.add("j")
        await worker._maybe_snapshot(force=False)  # the first one: due at once (interval 0)
        written.append(worker.metrics.snapshots._value.get())
        worker.dirty.add("j")
        await worker._maybe_snapshot(force=False)  # put off: the pause is now the cap
        written.append(worker.metrics.snapshots._value.get())
        await worker._maybe_snapshot(force=True)  # outputs to send: at once
        written.append(worker.metrics.snapshots._value.get())
        return written

    try:
        written = asyncio.run(snapshots())
    finally:
        worker.store.close()
    assert written == [1.0, 1.0, 2.0]
    assert worker.snapshot_pause == 3600.0
    assert worker.metrics.snapshot_seconds._value.get() > 0


@pytest.mark.kafka  # the worker's snapshot store writes to the local broker
def test_encoding_many_snapshots_lets_the_event_loop_run_between_jobs(
        kafka_settings: Settings, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backlog leaves hundreds of jobs dirty at once; encoding them in one go held the loop for 24 s in the
    >= 2 M reference run (aiokafka's heartbeats and Faust's commits behind it). Each job here takes 10 ms of
    CPU to encode, as a large job does on a loaded box: the loop must run between them."""
    import time

    from schemas import Topics
    from streams.detect import app as detect_app
    from streams.topics_admin import ensure_topics

    settings = replace(load_settings({}), home=tmp_path, app_id=unique_name, topic_prefix=f"{unique_name}.",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path)
    ensure_topics(settings, Topics(settings.topic_prefix), 1)
    worker = DetectWorker(base_app(settings, "detect"), settings)
    worker.stream = AckedStream()
    for i in range(40):
        worker.fleet.jobs[f"j{i}"] = JobEngine.create(f"j{i}", DetectionConfig.of(settings))
        worker.dirty.add(f"j{i}")
    beats = 0
    seen_by_encoder: list[int] = []
    real_encode = detect_app.encode_snapshot

    def slow_encode(engine: JobEngine, outbox: object) -> bytes:
        until = time.thread_time() + 0.01
        while time.thread_time() < until:
            pass
        seen_by_encoder.append(beats)
        return real_encode(engine, outbox)  # type: ignore[arg-type]

    monkeypatch.setattr(detect_app, "encode_snapshot", slow_encode)

    async def heartbeat(done: asyncio.Event) -> None:
        nonlocal beats
        while not done.is_set():
            beats += 1
            await asyncio.sleep(0)

    async def snapshot_beside_a_heartbeat() -> None:
        done = asyncio.Event()
        beating = asyncio.create_task(heartbeat(done))
        await asyncio.sleep(0)
        await worker._maybe_snapshot(force=True)
        done.set()
        await beating

    try:
        asyncio.run(snapshot_beside_a_heartbeat())
    finally:
        worker.store.close()
    assert len(seen_by_encoder) == 40 and worker.metrics.snapshots._value.get() == 40.0
    assert seen_by_encoder[-1] > seen_by_encoder[0], "the loop ran nothing while 40 snapshots encoded"
