"""A detect worker lets go of the jobs whose partitions went to another worker (streams/detect_app.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from steplens.config import DetectionConfig, Settings, load_settings
from streams.app import base_app
from streams.detect_app import DetectWorker
from streams.engine import JobEngine

pytestmark = [pytest.mark.kafka]  # the worker's clients read the local broker's credentials


def _worker(kafka_settings: Settings, tmp_path: Path) -> DetectWorker:
    settings = replace(load_settings({}), home=tmp_path, app_id="revoke-test",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path)
    return DetectWorker(base_app(settings, "detect"), settings)


def test_revoked_jobs_are_dropped_and_kept_jobs_stay(kafka_settings: Settings, tmp_path: Path) -> None:
    worker = _worker(kafka_settings, tmp_path)
    for job, partition in (("a", 0), ("b", 1), ("c", 2)):
        engine = JobEngine.create(job, DetectionConfig())
        engine.offsets[partition] = 41
        worker.fleet.jobs[job] = engine
        worker.pending[job] = []
    asyncio.run(worker.on_revoked({0, 2}))
    assert sorted(worker.fleet.jobs) == ["b"]
    assert sorted(worker.pending) == ["b"]


def test_a_job_without_input_yet_stays_and_no_partition_is_a_no_op(
        kafka_settings: Settings, tmp_path: Path) -> None:
    worker = _worker(kafka_settings, tmp_path)
    worker.fleet.jobs["new"] = JobEngine.create("new", DetectionConfig())  # no chunk applied: partition unknown
    engine = JobEngine.create("old", DetectionConfig())
    engine.offsets[1] = 3
    worker.fleet.jobs["old"] = engine
    asyncio.run(worker.on_revoked(set()))
    assert sorted(worker.fleet.jobs) == ["new", "old"]
    asyncio.run(worker.on_revoked({0, 1}))
    assert sorted(worker.fleet.jobs) == ["new"]
