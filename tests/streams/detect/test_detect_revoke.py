"""A detect worker lets go of the jobs whose partitions went to another worker (streams/detect/app.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import Settings, load_settings
from streams.app import base_app
from streams.detect.app import DetectWorker
from streams.detect.config import DetectionConfig
from streams.detect.engine import JobEngine
from tests.streams.helpers import AckedStream

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


class _Message:
    def __init__(self, value: bytes, partition: int, offset: int) -> None:
        self.value, self.partition, self.offset, self.topic = value, partition, offset, "partials"


class _Event:
    def __init__(self, value: bytes, partition: int, offset: int) -> None:
        self.message = _Message(value, partition, offset)


def test_an_assignment_drops_the_jobs_of_partitions_this_worker_does_not_own(
        kafka_settings: Settings, tmp_path: Path, unique_name: str) -> None:
    """The agent's first restore loads every job on the state topic; the copy of a job another
    worker owns stayed, ticked without input and wrote snapshots over the owner's (the owner then
    opened the job's incidents again under new ids: make chaos-cluster, workers_kill)."""
    from schemas import Topics
    from streams.topics_admin import ensure_topics

    settings = replace(load_settings({}), home=tmp_path, app_id=unique_name, topic_prefix=f"{unique_name}.",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path)
    ensure_topics(settings, Topics(settings.topic_prefix), 2)
    worker = DetectWorker(base_app(settings, "detect"), settings)
    for job, partition in (("mine", 0), ("theirs", 1)):
        engine = JobEngine.create(job, DetectionConfig())
        engine.offsets[partition] = 41
        worker.fleet.jobs[job] = engine
        worker.pending[job] = []
    worker.fleet.jobs["new"] = JobEngine.create("new", DetectionConfig())  # no input yet: its partition unknown
    try:
        asyncio.run(worker.restore({0}))
    finally:
        worker.store.close()
    assert sorted(worker.fleet.jobs) == ["mine", "new"] and sorted(worker.pending) == ["mine"]


def _restorable(kafka_settings: Settings, tmp_path: Path, unique_name: str) -> tuple[DetectWorker, list[_Event]]:
    """A worker whose state topic holds job "j" (input offset 10, outbox at seq 5), and a chunk of "j" at
    offset 11 of partials partition 0."""
    from producers.simulator.fleet import FleetJob
    from producers.simulator.topology import Topology
    from schemas import Topics, encode
    from streams.detect.combine import chunks as chunk_codec
    from streams.detect.ingest.decode import decode_batch
    from streams.detect.state.outbox import Outbox
    from streams.detect.state.store import encode as encode_snapshot
    from streams.topics_admin import ensure_topics

    settings = replace(load_settings({}), home=tmp_path, app_id=unique_name, topic_prefix=f"{unique_name}.",
                       kafka_bootstrap=kafka_settings.kafka_bootstrap, secrets_dir=kafka_settings.secrets_path)
    ensure_topics(settings, Topics(settings.topic_prefix), 1)
    worker = DetectWorker(base_app(settings, "detect"), settings)
    worker.stream = AckedStream()
    job = FleetJob("j", Topology(dp=2, tp=2, pp=1), steps=3, seed=1)
    history = JobEngine.create("j", DetectionConfig())
    history.offsets[0] = 10
    history.stats.chunks = 7
    worker.store.write({"j": encode_snapshot(history, Outbox("j", seq=5))})
    chunks, _ = decode_batch([encode(e) for e in next(iter(job.iter_steps()))], 1 << 20)
    return worker, [_Event(chunk_codec.dumps(c), 0, 11) for c in chunks if c["kind"] == "steps"]


def _landed_on_the_restored_state(worker: DetectWorker) -> None:
    engine = worker.fleet.jobs["j"]
    assert worker.outboxes["j"].seq == 5, "the job's outbox numbering was lost"
    assert engine.stats.chunks == 8 and engine.offsets[0] == 11, "the chunk did not land on the restored state"


def test_chunks_wait_for_the_restore_of_their_jobs(kafka_settings: Settings, tmp_path: Path,
                                                   unique_name: str) -> None:
    """Faust resumes the flow before the on_partitions_assigned handler has restored the snapshots. A
    chunk applied meanwhile made a fresh engine for its job, which the restore then kept as "newer"
    than the snapshot (its offset was later): the job's open incidents and outbox numbering were lost
    and its incidents opened again under new ids (make soak, after a detect worker was SIGKILLed)."""
    worker, events = _restorable(kafka_settings, tmp_path, unique_name)

    async def assigned_then_chunk() -> None:
        worker.restore_done.clear()  # what the assignment handler does first
        await asyncio.gather(worker.restore({0}), worker.on_chunks(events))

    try:
        asyncio.run(assigned_then_chunk())
    finally:
        worker.store.close()
    _landed_on_the_restored_state(worker)


def test_chunks_after_a_revoke_wait_for_the_next_assignments_restore(kafka_settings: Settings, tmp_path: Path,
                                                                     unique_name: str) -> None:
    """A chunk applied between a revoke (which drops the job) and the next assignment's restore made a
    fresh engine for the job, which that restore kept as newer than the job's snapshot: the job's
    open incidents opened again under new ids (make chaos-cluster, workers_kill)."""
    worker, events = _restorable(kafka_settings, tmp_path, unique_name)

    async def rebalance_with_a_chunk_in_between() -> None:
        await worker.restore({0})
        await worker.on_revoked({0})  # the job goes (its snapshot is on the topic) ...
        await asyncio.gather(worker.on_chunks(events), worker.restore({0}))  # ... and comes back

    try:
        asyncio.run(rebalance_with_a_chunk_in_between())
    finally:
        worker.store.close()
    _landed_on_the_restored_state(worker)
