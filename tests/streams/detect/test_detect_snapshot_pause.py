"""A big job's snapshots are spaced so that encoding them takes a bounded share of the detect worker
(streams/detect/app.py `snapshot_pause`); a snapshot with outputs to send is never put off."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import DetectionConfig, Settings, load_settings
from streams.app import base_app
from streams.detect.app import DetectWorker, snapshot_pause
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

    detection = replace(DetectionConfig(), snapshot_interval_s=0.0, snapshot_max_share=1e-9,
                        snapshot_interval_max_s=3600.0)  # any encoding stretches the pause to the cap
    settings = replace(load_settings({}), home=tmp_path, app_id=unique_name, topic_prefix=f"{unique_name}.",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path,
                       detection=detection)
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
