"""The real DDP workload (PyTorch, gloo, 4 ranks on loopback) instrumented with the hook, sending to the real Kafka.

- a CPU hog on rank 2 -> the detect worker names rank 2 in a SLOW_RANK incident;
- Kafka stopped mid-run and restarted -> every step event is on the topic exactly once, in order per
  rank, and once in ClickHouse after landing, and the training loop never blocked;
- a control command for rank r, steps s..s+2 -> kernel records and a profile pointer for exactly
  those steps, and the dump exists; also with the ranks sending through a node relay process, which
  then follows the control topic for them (no control consumer in any rank).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from infra.clients import kafka_client_config
from infra.launcher import InfraConfig, KafkaBroker
from infra.settings import Settings, load_settings
from producers.workloads.ddp_transformer import WorkloadConfig, load_results, run
from schemas import ControlCommand, Incident, KernelBatch, KernelSummary, ProfileReady, StepEvent, Topics
from schemas import encode as encode_event
from sinks import open_backend
from steplens.demo import start_worker, stop_worker
from steplens.lag import wait_group_caught_up
from streams.land.processor import landing_types
from streams.runtime import read_to_end
from streams.topics_admin import ensure_topics
from tests.producers._records import events_of, is_packed
from tests.streams.helpers import wait_topics_visible

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


@pytest.fixture
def settings(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> Iterator[Settings]:
    s = replace(load_settings({}), home=tmp_path / "home", kafka_bootstrap=kafka_settings.kafka_bootstrap,
                secrets_dir=kafka_settings.secrets_path,
                topic_prefix=f"{unique_name}.", app_id=unique_name, topic_partitions=2)
    ensure_topics(s, Topics(s.topic_prefix), s.topic_partitions)
    yield s


def _env(s: Settings, *, pack: bool = True) -> dict[str, str]:
    """The ranks' environment; `pack`: packed records (contract 1.2, the default), as the workers read them."""
    return {"STEPLENS_HOME": str(s.home), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
            "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
            "STEPLENS_TOPIC_PREFIX": s.topic_prefix, "STEPLENS_APP_ID": s.app_id,
            "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions), "STEPLENS_EMIT_PACK": "1" if pack else "0"}


def _read(s: Settings, topic: str, timeout_s: float = 30.0) -> list[Any]:
    """Every record of `topic` up to its end offsets at the time of the call (KafkaTimeoutError: no record
    for `timeout_s` before them)."""
    from kafka import TopicPartition

    consumer = KafkaConsumer(**kafka_client_config(s, "admin"), enable_auto_commit=False, group_id=None)
    try:
        parts: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while not parts and time.monotonic() < deadline:  # metadata of a fresh broker may lag
            parts = consumer.partitions_for_topic(topic) or set()
            if not parts:
                consumer.poll(timeout_ms=200)
        assert parts, f"topic {topic} has no partitions"
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        return [r for r in read_to_end(consumer, tps, end, stall_s=timeout_s)
                if r.offset < end[TopicPartition(r.topic, r.partition)]]
    finally:
        consumer.close()


def _events(s: Settings, topic: str) -> list[Any]:
    """Every event of `topic` (packed records expanded in array order), each validated."""
    return [e for m in _read(s, topic) for e in events_of(m.value)]


def _poll(s: Settings, topic: str, done: Any, timeout: float) -> list[Any]:
    """Events of `topic` once `done(events)` holds (re-read until the deadline)."""
    deadline = time.monotonic() + timeout
    events: list[Any] = []
    while time.monotonic() < deadline:
        events = _events(s, topic)
        if done(events):
            return events
    return events


def _names_slow_rank(incident: Incident) -> bool:
    """A SLOW_RANK (or SLOW_HOST) finding, alone or joined to another rule's incident on the same
    scope (the hogs also stretch rank 2's GC pauses, so R1 on T8 may open the incident first)."""
    return bool({"SLOW_RANK", "SLOW_HOST"} & {incident.rule, *(incident.rules or [])}) and bool(incident.ranks)


def test_cpu_hog_on_rank_2_is_named_by_the_detector(settings: Settings, tmp_path: Path) -> None:
    topics = Topics(settings.topic_prefix)
    # 16 CPU hogs on 2 cores starve rank 2's reporting thread too: its events arrive many seconds
    # late, so the detector's late-data window must wait for them (else it reads silence as a hang)
    env = {**os.environ, **_env(settings), "STEPLENS_DETECTION_WINDOW_TIMEOUT_MIN_S": "60",
           "STEPLENS_DETECTION_WINDOW_TIMEOUT_MAX_S": "120"}
    settings.home.mkdir(parents=True, exist_ok=True)
    wait_topics_visible(settings, (topics.steps, topics.kernel_summaries, topics.jobs, topics.detect_partials))
    worker = start_worker("detect", env, settings.home)
    try:
        # Known flake on 2 cores (see the issue notes): the hogs also starve the workers, so a run
        # can end before three consecutive steps were flagged. One more job, never more.
        for attempt in range(2):
            cfg = WorkloadConfig(job=f"hog-job-{attempt}", world=4, steps=60, fault="hog", fault_rank=2, hogs=16,
                                 follow_control=False, out_dir=str(tmp_path / f"out{attempt}"), env=_env(settings))
            run(cfg)
            incidents = [i for i in _poll(settings, topics.incidents,
                                          lambda ev, j=cfg.job: any(isinstance(i, Incident) and i.job == j
                                                                    and _names_slow_rank(i) for i in ev), 180)
                         if isinstance(i, Incident) and i.job == cfg.job]
            if any(_names_slow_rank(i) for i in incidents):
                break
    finally:
        assert stop_worker(worker) == 0
    # the busy time the detector compares: rank 2 computes longest, the others wait in the all-reduce
    sent = [e for m in _read(settings, topics.steps) for e in events_of(m.value)
            if isinstance(e, StepEvent) and e.job == cfg.job]
    # delivery is at-least-once (an ack that times out on this loaded box is re-sent from the spool):
    # every rank-step arrives, and any second copy is the very same event (landing dedups by key)
    by_key: dict[tuple[int, int], StepEvent] = {}
    for e in sent:
        assert by_key.setdefault((e.rank, e.step), e) == e, f"two different events for rank {e.rank} step {e.step}"
    assert sorted(by_key) == [(r, s) for r in range(4) for s in range(cfg.steps)]
    steps = list(by_key.values())
    assert len(steps) == 4 * cfg.steps
    busy = {r: sorted(e.duration_ms - (e.phases.comm_exposed_ms or 0) for e in steps if e.rank == r)[cfg.steps // 2]
            for r in range(4)}
    assert max(busy, key=lambda r: busy[r]) == 2, busy
    slow = [i for i in incidents if _names_slow_rank(i)]
    assert slow, f"no SLOW_RANK/SLOW_HOST incident; incidents: {[(i.rules, i.ranks) for i in incidents]}; " \
                 f"median busy {busy}"
    detail = [(i.rule, i.rules, i.scope, i.ranks, i.summary) for i in slow]
    assert all(2 in i.ranks for i in slow), detail
    # a rank incident names rank 2 alone; the hogs are a foreign process on the node, and when
    # another rank of the host (sharing the other core with two ranks, pytest, the broker and the
    # worker) was also slow for a few steps, the one host incident lists it beside rank 2 ("ranks
    # 2, 3 slow one after the other"), seen in 2 of 4 clean-clone runs: that is the host scope's
    # design, not a second culprit
    assert all(i.ranks == [2] for i in slow if i.scope == "rank"), detail
    assert all(i.scope in ("rank", "host") for i in slow), detail


def test_kafka_outage_mid_run_loses_and_duplicates_nothing(settings: Settings, tmp_path: Path) -> None:
    topics = Topics(settings.topic_prefix)
    broker = KafkaBroker(InfraConfig.from_env())
    steps = 100
    cfg = WorkloadConfig(job="outage-job", world=4, steps=steps, follow_control=False, step_sleep_ms=100,
                         out_dir=str(tmp_path / "out"), env=_env(settings, pack=True))
    errors: list[BaseException] = []

    def train() -> None:
        try:
            run(cfg)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    trainer = threading.Thread(target=train)
    trainer.start()
    spool = settings.home / "spool" / cfg.job
    try:
        first = _poll(settings, topics.steps, lambda ev: sum(isinstance(e, StepEvent) for e in ev) >= 8, 120)
        assert sum(isinstance(e, StepEvent) for e in first) >= 8
        broker.stop()
        # wait until every rank spooled while Kafka was away (the training loop kept going)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and trainer.is_alive():
            spooled = [d for d in spool.glob("rank*") if any(p.is_file() and p.stat().st_size for p in d.rglob("*"))]
            if len(spooled) == 4:
                break
            time.sleep(0.2)
        outage_ranks = len([d for d in spool.glob("rank*") if any(p.is_file() for p in d.rglob("*"))])
    finally:
        broker.start()
    trainer.join(600)
    assert not errors, errors
    assert outage_ranks == 4, "every rank spooled during the outage"
    records = sorted(_read(settings, topics.steps), key=lambda m: (m.partition, m.offset))
    by_rank: dict[int, list[int]] = {}
    packed = 0
    for m in records:  # packed records (the ranks run with STEPLENS_EMIT_PACK): expand in array order
        packed += is_packed(m.value)
        for e in events_of(m.value):
            if isinstance(e, StepEvent):
                by_rank.setdefault(e.rank, []).append(e.step)
    assert packed and len(records) < 4 * steps  # several steps per record
    # exactly once, in order per rank: the batch each rank had in flight when the broker stopped
    # was retried in place by the same idempotent producer (a copy the broker had already written
    # is dropped by it), and what came during the outage waited in the spool until after it
    assert by_rank == {r: list(range(steps)) for r in range(4)}, {
        r: [s for s in set(v) if v.count(s) > 1][:10] for r, v in by_rank.items()}
    results = load_results(Path(cfg.out_dir))
    assert all(r["emitter_spooled"] for r in results), [r["emitter_spooled"] for r in results]
    for r in results:
        times = [ms for _, ms in r["times"]]
        # the loop never waited for Kafka: the outage lasted seconds, no step came near it
        assert max(times) < 5000, times
        assert not r["emitter_dropped"], r["emitter_dropped"]

    # and once where it is stored
    chdb = tmp_path / "chdb"
    land = start_worker("land", {**os.environ, **_env(settings), "STEPLENS_CLICKHOUSE_URL": "",
                                 "STEPLENS_CHDB_PATH": str(chdb)}, settings.home)
    try:
        assert wait_group_caught_up(settings, f"{settings.app_id}-land", list(landing_types(topics)), 180,
                                    alive=lambda: land.poll() is None), "the land worker did not catch up"
    finally:
        assert stop_worker(land) == 0
    backend = open_backend(replace(settings, clickhouse_url="", chdb_path=chdb))
    try:
        rows = backend.query(f"SELECT rank, step, count() FROM {backend.database}.steps "
                             f"WHERE job = '{cfg.job}' GROUP BY rank, step ORDER BY rank, step")
    finally:
        backend.close()
    assert [(int(r), int(st), int(c)) for r, st, c in rows] == [(r, st, 1) for r in range(4) for st in range(steps)]


@pytest.mark.parametrize("via_relay", [False, True], ids=["own-consumers", "through-the-relay"])
def test_control_command_profiles_exactly_the_requested_steps(settings: Settings, tmp_path: Path, via_relay: bool,
                                                              request: pytest.FixtureRequest) -> None:
    topics = Topics(settings.topic_prefix)
    profile_root = tmp_path / "profiles"
    env = {**_env(settings, pack=True), "STEPLENS_PROFILE_ROOT": str(profile_root)}
    relay = None
    if via_relay:
        import tempfile

        from tests.producers.relay._process import RelayProcess

        sock = Path(tempfile.mkdtemp(prefix="slr")) / "relay.sock"  # AF_UNIX paths: at most 107 bytes
        settings = replace(settings, relay_socket=str(sock))
        relay = proc = RelayProcess(settings)

        def cleanup() -> None:  # a failing test must not leave the relay running
            if proc.proc.poll() is None:
                proc.kill()
            shutil.rmtree(sock.parent, ignore_errors=True)

        request.addfinalizer(cleanup)
        env["STEPLENS_RELAY_SOCKET"] = str(sock)
    cfg = WorkloadConfig(job="ctl-job", world=4, steps=45, step_sleep_ms=150, out_dir=str(tmp_path / "out"), env=env)
    first, count, target = 30, 3, 1
    errors: list[BaseException] = []

    def train() -> None:
        try:
            run(cfg)
        except BaseException as exc:
            errors.append(exc)

    trainer = threading.Thread(target=train)
    trainer.start()
    seen = _poll(settings, topics.steps, lambda ev: any(isinstance(e, StepEvent) for e in ev), 120)
    assert seen, "the job started"
    producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
    for cmd in (
        ControlCommand(command_id="cmd-3", job=cfg.job, action="profile_on", ranks=[3], step_first=first + 5,
                       step_count=2, issued_ns=time.time_ns()),
        ControlCommand(command_id="cmd-past", job=cfg.job, action="profile_on", ranks=[target], step_first=0,
                       step_count=1, issued_ns=time.time_ns()),
        ControlCommand(command_id="cmd-1", job=cfg.job, action="profile_on", ranks=[target], step_first=first,
                       step_count=count, issued_ns=time.time_ns()),
    ):
        producer.send(topics.control, value=encode_event(cmd))
    producer.flush()
    producer.close()
    trainer.join(600)
    relay_err = relay.stop() if relay is not None else ""
    assert not errors, errors
    last_steps = max(e.step for e in seen if isinstance(e, StepEvent))
    assert last_steps < first, "the command was sent before the requested steps"
    batches = [e for e in _events(settings, topics.kernels) if isinstance(e, KernelBatch)]
    wanted = sorted([(target, s) for s in range(first, first + count)] + [(3, first + 5), (3, first + 6)])
    assert sorted((b.rank, b.step) for b in batches) == wanted
    assert all(b.kernels for b in batches)
    assert any(k.cat == "comm" and k.op == "allreduce" for b in batches for k in b.kernels)
    pointers = [e for e in _events(settings, topics.profiles) if isinstance(e, ProfileReady)]
    assert sorted((p.rank, p.step_first, p.step_last, p.command_id) for p in pointers) == [
        (target, first, first + count - 1, "cmd-1"), (3, first + 5, first + 6, "cmd-3")]
    for pointer in pointers:
        assert pointer.format == "kineto" and Path(pointer.uri).is_file() and pointer.bytes
        assert Path(pointer.uri).is_relative_to(profile_root)
    steps = [e for e in _events(settings, topics.steps)
             if isinstance(e, StepEvent) and e.job == cfg.job]
    assert sorted((e.rank, e.step) for e in steps if e.profiling) == wanted
    summaries = [e for e in _events(settings, topics.kernel_summaries)
                 if isinstance(e, KernelSummary)]
    assert {e.rank for e in summaries} == {0, 1, 2, 3}
    assert all(e.entries[0].op == "allreduce" and e.entries[0].bytes for e in summaries)
    rank_stats = next(r for r in load_results(Path(cfg.out_dir)) if r["rank"] == target)["hook"]
    assert rank_stats["commands_accepted"] == 1 and rank_stats["profiles"] == 1
    if not via_relay:
        assert rank_stats["commands_ignored"] == {"other_rank": 1, "past_steps": 1}
    else:  # the relay pushed each command only to the rank it names: rank 1 never saw cmd-3
        assert rank_stats["commands_ignored"] == {"past_steps": 1}
        assert "4 subscriptions, 3 commands read, 3 pushed, 0 for no rank here, 0 invalid" in relay_err, relay_err
