"""`make chaos`: hostile input, killed workers and outages against the real pipeline; counts what was lost.

Real Kafka (infra/, this checkout's ports), the real `detect` and `land` workers as
subprocesses, embedded ClickHouse (chdb) for landing — except the ClickHouse outage case,
which lands in the ClickHouse server from infra/ and stops that server for 60 s (the honest
meaning of "ClickHouse down"; an embedded chdb cannot be taken away from its process).

Every case gets its own topics, consumer groups and database (its own "rig"), so its
numbers are its own. Counting (per case, after the workers stopped):

- sent: valid events the producer delivered to Kafka (steps + job events);
- landed: distinct keys of those events found in ClickHouse (steps (job, step, rank), jobs (job, phase));
- lost = sent - landed (distinct keys sent that never landed);
- duplicates: rows - distinct keys under FINAL (target 0); duplicates_raw: the same without
  FINAL (replays before ClickHouse merged them; expected after a crash, harmless under FINAL);
- dead_lettered: distinct (topic, partition, offset) in dead_letters; dead_letters_expected: malformed
  messages sent to the topics the land worker reads;
- duplicate_incidents: judged on the alerts topic, as a consumer of it sees them (not on
  ClickHouse, whose FINAL would hide repeats): per injected fault, slow-rank incidents beyond
  the first (another incident id for the same rank: `duplicate_incident_ids`), plus every
  `open` beyond the first for one incident id (`duplicate_opens`: a consumer pages twice);
  incidents_left_open: incidents whose last event on the topic is not `resolved`;
- recovery_s: after a worker kill, seconds from the kill until the restarted worker committed
  everything that was in its topics just after the kill (worst of the kills); after an outage,
  seconds from the service being back until the affected workers committed everything that was
  in their topics at that moment (both workers for Kafka, land for ClickHouse);
- workers_alive: both worker processes running at the end of the case.

Writes bench/results/chaos.json (keys in RESULTS.md) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaTimeoutError

from bench.chaos_inputs import stream
from bench.provenance import git_commit, machine
from infra.clients import kafka_client_config
from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker
from infra.progress import Progress
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import ContractError, ControlCommand, Incident, StepEvent, Topics, decode_as
from schemas.packing import decode_record_as
from sinks import open_backend
from sinks.migrations.runner import migrate
from steplens.demo import worker_env
from streams.detect.state.outbox import HEADER as OUTBOX_HEADER
from streams.runtime import read_to_end
from streams.topics_admin import ensure_topics

RESULTS = REPO_ROOT / "bench" / "results" / "chaos.json"
READY_TIMEOUT_S = 120.0
CATCH_UP_TIMEOUT_S = 90.0
LAND_TOPICS = ("steps", "jobs", "incidents")
DETECT_DECODE_TOPICS = ("steps", "kernel_summaries", "device", "jobs")  # the engine's decode loop
DETECT_TOPICS = ("detect_partials",)  # the engine's job-owning stage


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- a rig: one case's topics, groups, database and worker processes ----------------------------
@dataclass
class Rig:
    name: str
    settings: Settings
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)

    @property
    def topics(self) -> Topics:
        return Topics(self.settings.topic_prefix)

    def env(self) -> dict[str, str]:
        return worker_env(self.settings)

    def start(self, role: str, name: str | None = None, env: dict[str, str] | None = None) -> None:
        """Start a `role` worker process; `name` (default: the role) tells a second one of a role apart,
        `env` overrides variables of its environment (e.g. the ClickHouse node it lands through)."""
        name = name or role
        out = open(self.logs / f"{self.name}-{name}.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "streams", "worker", "--role", role], cwd=REPO_ROOT,
            env={**self.env(), **(env or {})},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts[name] = self.starts.get(name, 0) + 1

    def ready(self, name: str) -> bool:
        text = (self.logs / f"{self.name}-{name}.log").read_text(errors="replace")
        return text.count("Ready") >= self.starts[name]

    def wait_ready(self, names: tuple[str, ...]) -> bool:
        return poll_until(lambda: all(self.ready(r) for r in names), READY_TIMEOUT_S)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int | None:
        """Send `sig` to the worker and wait for it (60 s for a SIGTERM, then SIGKILL); its exit code."""
        return self.kill_all((name,), sig)[name]

    def kill_all(self, names: tuple[str, ...], sig: int = signal.SIGKILL) -> dict[str, int | None]:
        """`kill` for several workers at once: all are signalled before any is waited for (they stop side by
        side, as a supervisor stops a host's workers)."""
        for name in names:
            proc = self.procs[name]
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
        codes: dict[str, int | None] = {}
        for name in names:
            proc = self.procs[name]
            try:
                codes[name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                codes[name] = None
        return codes

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def stop(self) -> dict[str, int | None]:
        """SIGTERM to every worker, side by side; None for one that ignored it (SIGKILLed after 60 s)."""
        return self.kill_all(tuple(self.procs), signal.SIGTERM)


def poll_until(predicate: Callable[[], bool], timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # a broker or server coming back: try again
            pass
        time.sleep(every)
    return False


class Offsets:
    """End and committed offsets, over kafka-python clients rebuilt after any error (broker restarts)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._admin: KafkaAdminClient | None = None
        self._consumer: KafkaConsumer | None = None

    def _clients(self) -> tuple[KafkaAdminClient, KafkaConsumer]:
        if self._admin is None or self._consumer is None:
            cfg = kafka_client_config(self.settings, "admin")
            self._admin = KafkaAdminClient(**cfg, client_id="steplens-chaos")
            self._consumer = KafkaConsumer(**cfg, client_id="steplens-chaos", enable_auto_commit=False)
        return self._admin, self._consumer

    def reset(self) -> None:
        for client in (self._admin, self._consumer):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._admin = self._consumer = None

    def ends(self, topics: list[str]) -> dict[TopicPartition, int]:
        try:
            _, consumer = self._clients()
            parts = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]
            return dict(consumer.end_offsets(parts))
        except Exception:
            self.reset()
            raise

    def committed(self, group: str) -> dict[TopicPartition, int]:
        try:
            admin, _ = self._clients()
            offsets = admin.list_group_offsets({group: None}).get(group, {})
            return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}
        except Exception:
            self.reset()
            raise

    def covered(self, group: str, targets: dict[TopicPartition, int]) -> bool:
        done = self.committed(group)
        return all(done.get(tp, 0) >= end for tp, end in targets.items())

    def close(self) -> None:
        self.reset()


def role_groups(rig: Rig, role: str) -> dict[str, list[str]]:
    """The consumer groups a worker role commits in, with the topics each reads."""
    app = rig.settings.app_id
    if role == "land":
        return {f"{app}-land": [getattr(rig.topics, n) for n in LAND_TOPICS]}
    return {f"{app}-detect-decode": [getattr(rig.topics, n) for n in DETECT_DECODE_TOPICS],
            f"{app}-detect": [getattr(rig.topics, n) for n in DETECT_TOPICS]}


def caught_up(rig: Rig, offsets: Offsets, roles: tuple[str, ...] = ("detect", "land")) -> bool:
    for role in roles:
        if not any(name.startswith(role) for name in rig.procs):  # workers "detect", "detect2", ...
            continue
        for group, names in role_groups(rig, role).items():
            if not offsets.covered(group, offsets.ends(names)):
                return False
    return True


def wait_caught_up(rig: Rig, offsets: Offsets, roles: tuple[str, ...] = ("detect", "land")) -> bool:
    """Caught up twice in a row (a group step published late by detect must land too)."""
    streak = [0]

    def twice() -> bool:
        streak[0] = streak[0] + 1 if caught_up(rig, offsets, roles) else 0
        return streak[0] >= 2

    return poll_until(twice, CATCH_UP_TIMEOUT_S, every=1.0)


def recovery_after(rig: Rig, offsets: Offsets, roles: tuple[str, ...], t_up: float) -> float | None:
    """Seconds from `t_up` (a service back) until `roles` committed everything in their topics at that moment."""
    targets: dict[str, dict[TopicPartition, int]] = {}

    def snapshot() -> bool:
        for role in roles:
            for group, names in role_groups(rig, role).items():
                targets[group] = offsets.ends(names)
        return True

    if not poll_until(snapshot, 120.0):
        return None
    ok = poll_until(lambda: all(offsets.covered(g, t) for g, t in targets.items()), CATCH_UP_TIMEOUT_S,
                    every=0.25)
    return round(time.monotonic() - t_up, 2) if ok else None


# --- producing -------------------------------------------------------------------------------------
@dataclass
class Sent:
    steps: set[tuple[str, int, int]] = field(default_factory=set)
    jobs: set[tuple[str, str]] = field(default_factory=set)
    malformed: dict[str, int] = field(default_factory=dict)  # topic kind -> count
    dropped: int = 0
    emitter_pending: int = 0

    @property
    def valid(self) -> int:
        return len(self.steps) + len(self.jobs)

    def merge(self, other: Sent) -> None:
        """Add what another sender sent (one `Sent` per producing thread, counted together)."""
        self.steps |= other.steps
        self.jobs |= other.jobs
        for kind, n in other.malformed.items():
            self.malformed[kind] = self.malformed.get(kind, 0) + n
        self.dropped += other.dropped
        self.emitter_pending += other.emitter_pending


def new_emitter(rig: Rig, name: str = "") -> BackgroundEmitter:
    """An emitter with its own spool (`name`: one per concurrent sender, as each process on a host has)."""
    exporter = KafkaExporter(rig.settings.kafka_bootstrap, export_timeout_s=5.0,
                             extra_config=kafka_client_config(rig.settings, "producer"))
    return BackgroundEmitter(exporter, rig.topics,
                             name=f"chaos-{rig.name}{name}",
                             spool_dir=rig.settings.home / "spool" / f"{rig.name}{name}",
                             retry_backoff_max_s=2.0)


def emit_job(rig: Rig, job: FleetJob, sent: Sent, pace_s: float, stop: threading.Event | None = None,
             on_step: Callable[[int], None] | None = None) -> None:
    """Emit the whole job (start, steps, end) at `pace_s` per step through one emitter (its spool named
    after the job); record what went out."""
    emitter = new_emitter(rig, f"-{job.job_id}")
    start, end = job.job_events()
    emitter.emit(start)
    sent.jobs.add((job.job_id, "start"))
    bar = Progress(job.steps, f"emit {job.job_id}", unit="steps")
    for i, events in enumerate(job.iter_steps()):
        if stop is not None and stop.is_set():
            break
        for event in events:
            if emitter.emit(event):
                sent.steps.add((event.job, event.step, event.rank))
        if on_step is not None:
            on_step(i)
        bar.update(1)
        time.sleep(pace_s)
    bar.close()
    if emitter.emit(end):
        sent.jobs.add((job.job_id, "end"))
    emitter.flush(600)
    stats = emitter.stats()
    emitter.close(timeout=30)
    sent.dropped += stats.dropped_total
    sent.emitter_pending += stats.pending


# --- reading the results ----------------------------------------------------------------------------
def count(rig: Rig, sent: Sent, slow_ranks: set[int], job: str) -> dict[str, Any]:
    backend = open_backend(rig.settings)
    try:
        # a land worker that crashed before its first write never created the tables
        migrate(backend, cluster=rig.settings.clickhouse_cluster)
        db = backend.database
        rows_raw, keys_raw = backend.query(f"SELECT count(), uniqExact(job, step, rank) FROM {db}.steps")[0]
        rows_final, keys_final = backend.query(f"SELECT count(), uniqExact(job, step, rank) FROM {db}.steps FINAL")[0]
        landed_steps = {(j, int(s), int(r)) for j, s, r in backend.query(f"SELECT job, step, rank FROM {db}.steps")}
        jobs_raw, jobs_keys = backend.query(f"SELECT count(), uniqExact(job, phase) FROM {db}.jobs")[0]
        jobs_final, _ = backend.query(f"SELECT count(), uniqExact(job, phase) FROM {db}.jobs FINAL")[0]
        landed_jobs = {(j, p) for j, p in backend.query(f"SELECT job, phase FROM {db}.jobs")}
        dead_rows, dead_distinct = backend.query(
            f"SELECT count(), uniqExact(topic, `partition`, `offset`) FROM {db}.dead_letters")[0]
    finally:
        backend.close()
    incidents, foreign = read_alerts(rig, job)
    lost_steps = len(sent.steps - landed_steps)
    lost_jobs = len(sent.jobs - landed_jobs)
    per_fault: dict[int, set[str]] = {r: set() for r in slow_ranks}
    last: dict[str, str] = {}
    for alert in incidents:  # one job: one partition, topic order is publication order
        if "SLOW_RANK" in (alert.rules or [alert.rule]):
            for r in alert.ranks:
                per_fault.setdefault(int(r), set()).add(alert.incident_id)
        last[alert.incident_id] = alert.state
    duplicate_ids = sum(max(len(ids) - 1, 0) for r, ids in per_fault.items() if r in slow_ranks)
    duplicate_opens = repeated_opens(incidents)
    commands = read_commands(rig, job)
    profile_on = {r: sum(1 for c in commands if c.action == "profile_on" and r in c.ranks) for r in slow_ranks}
    expected_dead = sum(n for kind, n in sent.malformed.items() if kind in LAND_TOPICS)
    return {
        "sent": sent.valid,
        "landed": len(sent.steps & landed_steps) + len(sent.jobs & landed_jobs),
        "lost": lost_steps + lost_jobs,
        "duplicates": (rows_final - keys_final) + (jobs_final - jobs_keys),
        "duplicates_raw": (rows_raw - keys_raw) + (jobs_raw - jobs_keys),
        "dead_lettered": dead_distinct,
        "dead_letter_rows": dead_rows,
        "dead_letters_expected": expected_dead,
        "malformed_sent": sum(sent.malformed.values()),
        "producer_dropped": sent.dropped,
        "producer_pending": sent.emitter_pending,
        "duplicate_incidents": duplicate_ids + duplicate_opens,
        "duplicate_incident_ids": duplicate_ids,
        "duplicate_opens": duplicate_opens,
        "slow_rank_found": sorted(r for r, ids in per_fault.items() if ids and r in slow_ranks),
        "incidents": len(last),
        "incident_events": len(incidents),
        "foreign_alerts": foreign,
        "incidents_left_open": sum(1 for state in last.values() if state != "resolved"),
        "duplicate_profile_on": sum(max(n - 1, 0) for n in profile_on.values()),
    }


def repeated_opens(incidents: list[Incident]) -> int:
    """Every `open` beyond the first for one incident id: each one pages a consumer again."""
    opens: dict[str, int] = {}
    for alert in incidents:
        if alert.state == "open":
            opens[alert.incident_id] = opens.get(alert.incident_id, 0) + 1
    return sum(n - 1 for n in opens.values() if n > 1)


def messages(rig: Rig, topic: str, idle_ms: int = 3000) -> Iterator[Any]:
    """Every message of `topic` from the start up to its end offsets when called; where those cannot be read
    (a partition without a leader in a failover case) or are not reached, until none came for `idle_ms`.

    Reading to the end offsets instead of waiting out an idle spell saves the spell on every read: a restart
    cycle reads the alerts, the partials and the control topic, several times.
    """
    consumer = KafkaConsumer(**kafka_client_config(rig.settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=idle_ms)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        try:
            ends: dict[TopicPartition, int] = consumer.end_offsets(parts) if parts else {}
        except Exception:  # no leader for a partition: read until idle
            ends = {}
        if not parts or len(ends) < len(parts):
            consumer.subscribe([topic])
            yield from consumer
            return
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        try:
            yield from read_to_end(consumer, parts, ends, stall_s=idle_ms / 1000)
        except KafkaTimeoutError:  # nothing came for idle_ms before the ends: what came is all there is
            return
    finally:
        consumer.close()


def read_alerts(rig: Rig, job: str) -> tuple[list[Incident], int]:
    """The incident events detect published for `job` on the alerts topic, in publication order.

    Detect's events carry its outbox header; the malformed case also writes forged incidents
    for the job (they decode): those are counted apart, as `foreign_alerts`.
    """
    out: list[Incident] = []
    foreign = 0
    for msg in messages(rig, rig.topics.incidents):
        try:
            alert = decode_as(Incident, msg.value)
        except Exception:
            continue  # the malformed case writes garbage here on purpose
        if alert.job != job:
            continue
        if any(k == OUTBOX_HEADER for k, _ in (msg.headers or ())):
            out.append(alert)
        else:
            foreign += 1
    return out, foreign


def topic_copies(rig: Rig, job: str) -> dict[str, int]:
    """How the producer's step events sit on the steps topic: events, distinct (step, rank), copies beyond one.

    Judged on the topic itself (before landing's dedup), packed records expanded.
    """
    seen: dict[tuple[int, int], int] = {}
    events = 0
    for msg in messages(rig, rig.topics.steps, idle_ms=5000):
        try:
            items = decode_record_as(StepEvent, msg.value)
        except ContractError:
            continue
        for ev in items:
            if isinstance(ev, StepEvent) and ev.job == job:
                events += 1
                seen[(ev.step, ev.rank)] = seen.get((ev.step, ev.rank), 0) + 1
    return {"topic_events": events, "topic_distinct": len(seen), "topic_duplicates": events - len(seen)}


def read_commands(rig: Rig, job: str) -> list[ControlCommand]:
    out: list[ControlCommand] = []
    for msg in messages(rig, rig.topics.control):
        try:
            command = decode_as(ControlCommand, msg.value)
        except Exception:
            continue
        if command.job == job:
            out.append(command)
    return out


# --- the cases ------------------------------------------------------------------------------------------
@dataclass
class Harness:
    base: Settings
    cfg: InfraConfig
    run_dir: Path
    quick: bool

    def rig(self, name: str, server_url: str = "") -> Rig:
        home = self.run_dir / name
        home.mkdir(parents=True, exist_ok=True)
        stamp = self.run_dir.name.replace("-", "")
        settings = replace(self.base, home=home, topic_prefix=f"chaos{stamp}{name}.", app_id=f"chaos{stamp}{name}",
                           topic_partitions=2, chdb_path=home / "chdb", clickhouse_url=server_url,
                           clickhouse_database=f"chaos_{stamp}_{name}")
        ensure_topics(settings, Topics(settings.topic_prefix), settings.topic_partitions)
        return Rig(name, settings, self.run_dir)

    def job(self, name: str, steps: int, slow_rank: int | None = None) -> FleetJob:
        topo = Topology(dp=4, tp=2, pp=1)
        faults = [straggler(topo, slow_rank, 1.4)] if slow_rank is not None else []
        return FleetJob(f"chaos-{name}", topo, steps, faults, 11)

    def finish(self, rig: Rig, offsets: Offsets, sent: Sent, job: FleetJob,
               extra: dict[str, Any]) -> dict[str, Any]:
        caught = wait_caught_up(rig, offsets)
        alive = rig.alive()
        codes = rig.stop()
        offsets.close()
        self.before_count(rig)
        result = count(rig, sent, job.ground_truth().slow_ranks(), job.job_id)
        result.update(workers_alive=alive, caught_up=caught, stop_codes=codes, **extra)
        return result

    def before_count(self, rig: Rig) -> None:
        """Called once the workers stopped, before counting (a cluster waits for its replicas here)."""

    def case_malformed(self) -> dict[str, Any]:
        rig = self.rig("malformed")
        offsets = Offsets(rig.settings)
        rig.start("detect")
        rig.start("land")
        rig.wait_ready(("detect", "land"))
        job = self.job("malformed", steps=60 if self.quick else 120, slow_rank=3)
        sent = Sent()
        total = 1000 if self.quick else 10_000
        producer = KafkaProducer(**kafka_client_config(rig.settings, "admin"), acks="all",
                                 max_request_size=4_194_304, linger_ms=20)
        kinds = ("steps", "jobs", "incidents", "detect_partials", "detect_state")
        bad = stream(kinds, job.job_id, total)
        per_step = total // job.steps + 1

        def interleave(_: int) -> None:
            for _ in range(per_step):
                item = next(bad, None)
                if item is None:
                    return
                topic_kind, _kind, key, value = item
                producer.send(getattr(rig.topics, topic_kind), key=key, value=value)
                sent.malformed[topic_kind] = sent.malformed.get(topic_kind, 0) + 1

        emit_job(rig, job, sent, pace_s=0.02, on_step=interleave)
        for topic_kind, _kind, key, value in bad:  # whatever did not fit between the steps
            producer.send(getattr(rig.topics, topic_kind), key=key, value=value)
            sent.malformed[topic_kind] = sent.malformed.get(topic_kind, 0) + 1
        producer.flush(120)
        producer.close()
        log(f"malformed: sent {sum(sent.malformed.values())} malformed, {sent.valid} valid")
        return self.finish(rig, offsets, sent, job, {"recovery_s": None})

    def case_kill(self, role: str) -> dict[str, Any]:
        rig = self.rig(f"kill_{role}")
        offsets = Offsets(rig.settings)
        rig.start("detect")
        rig.start("land")
        rig.wait_ready(("detect", "land"))
        kills = 2 if self.quick else 3
        job = self.job(f"kill-{role}", steps=1000 if self.quick else 1800, slow_rank=5)
        sent = Sent()
        producer = threading.Thread(target=emit_job, args=(rig, job, sent, 0.05), daemon=True)
        producer.start()
        recoveries: list[float | None] = []
        rng = random.Random(7)
        for n in range(kills):
            time.sleep(3.0 + rng.random() * 3.0)  # mid-stream: batches and windows are open
            t_kill = time.monotonic()
            rig.kill(role)
            rig.start(role)  # a supervisor restarts it at once
            # what is in the topics after the kill can only be committed by the restarted worker
            targets = {g: offsets.ends(names) for g, names in role_groups(rig, role).items()}
            ok = poll_until(lambda t=targets: all(offsets.covered(g, e) for g, e in t.items()),  # type: ignore[misc]
                            120.0, every=0.25)
            recoveries.append(round(time.monotonic() - t_kill, 2) if ok else None)
            log(f"kill {role} #{n + 1}: recovered in {recoveries[-1]} s")
            if not ok:
                break
        producer.join(timeout=600)
        finite = [r for r in recoveries if r is not None]
        worst = max(finite) if finite and len(finite) == len(recoveries) else None
        return self.finish(rig, offsets, sent, job, {"recovery_s": worst, "kills": kills,
                                                      "recoveries_s": recoveries})

    def case_restarts(self) -> dict[str, Any]:
        """Start-ups in a row (bench/restarts.py): each role started and stopped 6 times (3 of them SIGKILL),
        a second detect worker joining and leaving, partitions added mid-job."""
        from bench.restarts import RestartRun, plan

        results = RestartRun(self).run(plan(6 if self.quick else 10))
        lags = [r.lag_zero_s for r in results if r.lag_zero_s is not None]
        worst = max(lags) if len(lags) == len(results) else None
        lost = [r.lost for r in results]
        duplicates = [r.duplicates for r in results]
        return {"sent": sum(r.sent for r in results), "landed": sum(r.landed for r in results),
                # a deployment's database outlives its cycles: its dead letters are counted in each (0 expected)
                "dead_lettered": max((r.dead_lettered for r in results), default=0),
                "lost": sum(lost) if None not in lost else None,
                "duplicates": sum(duplicates) if None not in duplicates else None,
                "recovery_s": worst,  # a start-up's recovery: its last send to every group's lag 0
                "cycles": len(results), "cycles_ok": sum(r.ok for r in results),
                "max_lag_zero_s": worst,
                "decoded_twice": sum(r.decoded_twice for r in results),
                "duplicate_incidents": sum(max(0, r.slow_rank_incidents - 1) for r in results),
                "missed_incidents": sum(r.slow_rank_incidents == 0 for r in results),
                "other_incidents": sum(r.other_incidents for r in results),
                "workers_alive": all(all(c in (0, -9) for c in r.exit_codes.values()) for r in results),
                "failed": [r.as_dict() for r in results if not r.ok]}

    def case_kafka_restart(self, down_s: float) -> dict[str, Any]:
        rig = self.rig("kafka_restart")
        offsets = Offsets(rig.settings)
        rig.start("detect")
        rig.start("land")
        rig.wait_ready(("detect", "land"))
        broker = KafkaBroker(self.cfg)
        job = self.job("kafka-restart", steps=int((down_s + 30) / 0.05), slow_rank=2)
        sent = Sent()
        producer = threading.Thread(target=emit_job, args=(rig, job, sent, 0.05), daemon=True)
        producer.start()
        time.sleep(10.0)
        log(f"kafka_restart: stopping the broker for {down_s:.0f} s")
        offsets.reset()
        broker.stop()
        t_down = time.monotonic()
        time.sleep(max(down_s - (time.monotonic() - t_down), 0))
        broker.start(timeout=180)
        t_up = time.monotonic()
        log(f"kafka_restart: broker back after {t_up - t_down:.0f} s")
        recovery = recovery_after(rig, offsets, ("detect", "land"), t_up)
        producer.join(timeout=600)
        return self.finish(rig, offsets, sent, job, {"recovery_s": recovery, "down_s": round(t_up - t_down, 1),
                                                     **topic_copies(rig, job.job_id)})

    def case_clickhouse_down(self, down_s: float) -> dict[str, Any]:
        server = ClickHouseServer(self.cfg)
        server.install()
        server.start()
        rig = self.rig("clickhouse_down", server_url=server.url)
        offsets = Offsets(rig.settings)
        rig.start("detect")
        rig.start("land")
        rig.wait_ready(("detect", "land"))
        job = self.job("clickhouse-down", steps=int((down_s + 20) / 0.05), slow_rank=2)
        sent = Sent()
        producer = threading.Thread(target=emit_job, args=(rig, job, sent, 0.05), daemon=True)
        producer.start()
        time.sleep(8.0)
        log(f"clickhouse_down: stopping the ClickHouse server for {down_s:.0f} s")
        server.stop()
        t_down = time.monotonic()
        time.sleep(down_s)
        server.start()
        t_up = time.monotonic()
        log(f"clickhouse_down: server back after {t_up - t_down:.0f} s")
        recovery = recovery_after(rig, offsets, ("land",), t_up)
        producer.join(timeout=600)
        return self.finish(rig, offsets, sent, job, {"recovery_s": recovery, "down_s": round(t_up - t_down, 1),
                                                     **topic_copies(rig, job.job_id)})


TABLE_COLUMNS = ("sent", "landed", "lost", "duplicates", "dead_lettered", "dead_letters_expected",
                 "duplicate_incidents", "incidents_left_open", "recovery_s", "workers_alive", "caught_up")


def table(cases: dict[str, dict[str, Any]], cols: tuple[str, ...] = TABLE_COLUMNS) -> str:
    head = "| case | " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for name, res in cases.items():
        lines.append(f"| {name} | " + " | ".join(str(res.get(c, "")) for c in cols) + " |")
    return "\n".join(lines)


def run_cases(runners: dict[str, Callable[[], dict[str, Any]]], names: list[str], cases: dict[str, dict[str, Any]],
              run_dir: Path) -> None:
    """Run each named case into `cases`; a case that breaks the harness is reported, the others still run."""
    for name in names:
        log(f"case {name} (logs in {run_dir})")
        t0 = time.monotonic()
        commit = git_commit()
        try:
            cases[name] = runners[name]()
        except Exception as exc:
            cases[name] = {"error": repr(exc), "workers_alive": False}
        cases[name]["duration_s"] = round(time.monotonic() - t0, 1)
        cases[name]["started"] = datetime.fromtimestamp(time.time() - (time.monotonic() - t0), UTC).isoformat()
        cases[name]["git"] = commit
        cases[name]["loadavg_1m"] = round(os.getloadavg()[0], 1)  # 2 cores shared: a load of 30 slows every restart
        log(f"case {name}: {json.dumps(cases[name], default=str)}")


def summarize(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's totals over its cases (chaos.json's top-level keys besides provenance)."""
    return {
        "failed_cases": sorted(name for name, c in cases.items() if "error" in c),  # not "nothing lost"
        "lost_total": sum(int(c.get("lost", 0) or 0) for c in cases.values()),
        "duplicates_total": sum(int(c.get("duplicates", 0) or 0) for c in cases.values()),
        "duplicate_incidents_total": sum(int(c.get("duplicate_incidents", 0) or 0) for c in cases.values()),
        "all_workers_alive": all(bool(c.get("workers_alive")) for c in cases.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller numbers and 20 s outages (development)")
    parser.add_argument("--cases", default="malformed,kill_land,kill_detect,restarts,kafka_restart,clickhouse_down")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--update", action="store_true", help="replace only these cases in an existing --out file")
    parser.add_argument("--down-s", type=float, default=None,
                        help="outage length for kafka_restart and clickhouse_down (default 62 s, 20 s with --quick)")
    args = parser.parse_args(argv)
    base = load_settings()
    cfg = InfraConfig.from_env()
    broker = KafkaBroker(cfg)
    broker.install()
    broker.start()
    base = replace(base, kafka_bootstrap=broker.bootstrap, secrets_dir=cfg.client_settings().secrets_path)
    started = datetime.now(UTC)
    run_dir = base.home / "chaos" / started.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    harness = Harness(base, cfg, run_dir, args.quick)
    down_s = args.down_s if args.down_s is not None else 20.0 if args.quick else 62.0
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "malformed": harness.case_malformed,
        "kill_land": lambda: harness.case_kill("land"),
        "kill_detect": lambda: harness.case_kill("detect"),
        "restarts": harness.case_restarts,
        "kafka_restart": lambda: harness.case_kafka_restart(down_s),
        "clickhouse_down": lambda: harness.case_clickhouse_down(down_s),
    }
    cases: dict[str, dict[str, Any]] = {}
    if args.update and args.out.exists():
        cases.update(json.loads(args.out.read_text()).get("cases", {}))
    run_cases(runners, args.cases.split(","), cases, run_dir)
    result = {
        "cases": cases,
        **summarize(cases),
        "quick": args.quick,
        "machine": machine(),
        "started": started.isoformat(),
        "git": git_commit(),
        "logs": str(run_dir),
    }
    failed = result["failed_cases"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(cases))
    print(f"lost_total {result['lost_total']}  duplicates_total {result['duplicates_total']}  "
          f"-> {args.out}" + (f"  FAILED CASES: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
