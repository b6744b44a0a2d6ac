"""The detect worker under SIGKILL and rebalance: real broker, real worker processes.

Judged on what the worker publishes (alerts and control topics) and on its final state
snapshot (every step evaluated, none incomplete), against the simulator's ground truth.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer

from infra.clients import kafka_client_config
from infra.settings import Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import gc_pauses, straggler
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology
from schemas import ControlCommand, Incident, StepEvent, Topics, decode_as
from steplens.demo import start_worker, stop_worker
from steplens.lag import group_lag
from streams.detect.state.store import SnapshotStore
from streams.topics_admin import DetectTopics, ensure_topics
from tests.streams.helpers import step_ms

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TIMEOUT_S = 240.0


@pytest.fixture
def settings(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> Iterator[Settings]:
    s = replace(load_settings({}), home=tmp_path, kafka_bootstrap=kafka_settings.kafka_bootstrap,
        secrets_dir=kafka_settings.secrets_path, topic_prefix=f"{unique_name}.",
                app_id=unique_name, topic_partitions=3)
    ensure_topics(s, Topics(s.topic_prefix), s.topic_partitions)
    yield s


def _env(s: Settings) -> dict[str, str]:
    return {**os.environ, "STEPLENS_HOME": str(s.home), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
            "STEPLENS_TOPIC_PREFIX": s.topic_prefix, "STEPLENS_APP_ID": s.app_id,
            "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions)}


def _send(s: Settings, events: list[object]) -> None:
    with BackgroundEmitter(
            KafkaExporter(s.kafka_bootstrap, extra_config=kafka_client_config(s, "producer")),
            Topics(s.topic_prefix)) as emitter:
        for event in events:
            assert emitter.emit(event)
        assert emitter.flush(timeout=60)
        assert emitter.stats().dropped_total == 0


def _read(s: Settings, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(topic, **kafka_client_config(s, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def _wait(what: str, check: object, workers: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():  # type: ignore[operator]
        for proc in workers:
            assert proc.poll() is None, f"a detect worker exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1.0)


def _caught_up(s: Settings) -> bool:
    topics = Topics(s.topic_prefix)
    try:
        decode = group_lag(s, f"{s.app_id}-detect-decode", [topics.steps, topics.jobs])
        detect = group_lag(s, f"{s.app_id}-detect", [DetectTopics(s.topic_prefix).partials])
        return all(v == 0 for v in (*decode.values(), *detect.values()))
    except Exception:
        return False


def _job() -> FleetJob:
    topo = Topology(dp=4, tp=2, pp=2)
    return FleetJob("restart-job", topo, steps=60, seed=9,
                    faults=[straggler(topo, 5, 1.3), *gc_pauses(topo, (45,), 0.66 * step_ms(topo))],
                    noise=Noise.quiet())  # exact slow steps: no eval step (50) to extend the GC incident


def _alerts(s: Settings) -> list[Incident]:
    return [decode_as(Incident, v) for v in _read(s, Topics(s.topic_prefix).incidents)]


def _check_outcome(s: Settings, job: FleetJob) -> None:
    """What a consumer of the alerts and control topics saw, against the simulator's ground truth.

    A duplicate is a second incident (another id) for one fault, or a second `open`,
    `resolved` or `profile_on` for one incident (a consumer pages twice).
    """
    truth = job.ground_truth()
    alerts = _alerts(s)
    rank_ids = {a.incident_id for a in alerts if a.rule == "SLOW_RANK"}
    assert len(rank_ids) == 1, f"one slow-rank problem, one incident: {rank_ids}"
    for state in ("open", "resolved"):
        ids = [a.incident_id for a in alerts if a.state == state]
        assert sorted(ids) == sorted({a.incident_id for a in alerts}), f"one {state} per incident: {ids}"
    assert {r for a in alerts if a.rule == "SLOW_RANK" for r in a.ranks} == truth.slow_ranks()
    last = {a.incident_id: a for a in alerts}
    assert all(a.state == "resolved" for a in last.values())
    slow_steps = {st for a in last.values() if a.rule == "SLOW_STEP"
                  for st in range((a.step_first or 0), (a.step_last or 0) + 1)}
    assert slow_steps == truth.slow_steps()
    commands = [decode_as(ControlCommand, v) for v in _read(s, Topics(s.topic_prefix).control)]
    assert [(c.command_id, tuple(c.ranks)) for c in commands] == [
        (f"profile:{next(iter(rank_ids))}", tuple(sorted(truth.slow_ranks())))]
    engine = SnapshotStore(s, DetectTopics(s.topic_prefix).state).load_all()[job.job_id]
    assert engine.finished
    assert engine.stats.frames == job.steps, "every step evaluated once"
    assert engine.frames.stats.incomplete == 0, "no rank's report lost"
    _check_state_cli(s, job.job_id)


def _check_state_cli(s: Settings, job: str) -> None:
    """The worker's snapshot, as an operator sees it: format SLD1, its objects by stable type name."""
    def cli(*args: str) -> bytes:
        return subprocess.run([sys.executable, "-m", "steplens", "state", *args], env=_env(s), check=True,
                              capture_output=True, timeout=120).stdout

    listed = orjson.loads(cli("list", "--format", "json"))
    assert [(row["job"], row["format"]) for row in listed] == [(job, "SLD1")]
    shown = orjson.loads(cli("dump", "--job", job, "--values", "2"))
    engine = shown["objects"][0]
    assert shown["format"] == "SLD1" and engine["$type"] == "engine.JobEngine"
    assert engine["fields"]["job"] == job and engine["fields"]["finished"] is True
    arrays = [v for o in shown["objects"] for v in o["fields"].values() if isinstance(v, dict) and "$array" in v]
    assert arrays and all(len(a["values"]) <= 2 for a in arrays)


def _events(job: FleetJob) -> tuple[list[object], list[object], list[object]]:
    start, end = job.job_events()
    steps: list[StepEvent] = [e for events in job.iter_steps() for e in events]
    return [start], list(steps), [end]


def test_sigkill_and_restart_lose_nothing_and_duplicate_nothing(settings: Settings) -> None:
    job = _job()
    start, steps, end = _events(job)
    half = len(steps) // 2
    first = start_worker("detect", _env(settings), settings.home)
    workers = [first]
    try:
        _send(settings, start + steps[:half])
        _wait("the slow-rank incident", lambda: any(a.rule == "SLOW_RANK" for a in _alerts(settings)), workers)
        os.killpg(first.pid, signal.SIGKILL)  # mid-run: the first half may still be in decode, detect or the outbox
        first.wait()
        workers = []
        _send(settings, steps[half:] + end)
        second = start_worker("detect", _env(settings), settings.home)
        workers = [second]
        _wait("the job finished", lambda: _caught_up(settings) and all(
            a.state == "resolved" for a in {x.incident_id: x for x in _alerts(settings)}.values()), workers)
    finally:
        for proc in workers:
            stop_worker(proc)
    _check_outcome(settings, job)


def test_a_second_worker_takes_over_partitions_without_loss(settings: Settings) -> None:
    job = _job()
    start, steps, end = _events(job)
    third = len(steps) // 3
    workers = [start_worker("detect", _env(settings), settings.home)]
    try:
        _send(settings, start + steps[:third])
        _wait("the first third analysed", lambda: _caught_up(settings), workers)
        workers.append(start_worker("detect", _env(settings), settings.home))
        _send(settings, steps[third:2 * third])
        _send(settings, steps[2 * third:] + end)
        _wait("the job finished", lambda: _caught_up(settings) and all(
            a.state == "resolved" for a in {x.incident_id: x for x in _alerts(settings)}.values()), workers)
    finally:
        codes = [stop_worker(proc) for proc in workers]
    assert codes == [0, 0]
    _check_outcome(settings, job)
