"""`make chaos-cluster`: the loopback cluster's failures under a paced load, counted as `make chaos` counts.

The cluster of `python -m infra.launcher up --cluster` (3 KRaft nodes, topics with 3 replicas and
min.insync.replicas=2, ZooKeeper, 2 shards x 2 ClickHouse replicas behind Distributed
tables) and 2 detect + 2 land workers (the land workers entering through different shards).
Each case runs on its own rig (topics, groups, database; bench/chaos.py's `Rig`) while two
jobs are emitted at 20 steps/s: the counted job (8 ranks, a slow rank: lost, duplicates
under FINAL, duplicate incidents, exactly as bench/chaos.py counts) and a probe job (8
ranks, a GC pause on every 10th step from step 20) whose SLOW_STEP alerts time detection:
latency = the alert's arrival on the incidents topic (a live consumer) - the moment the
paused step's events were handed to the emitter. The cases, after a warm-up:

- broker_kill: SIGKILL of a broker that is not the KRaft leader, restarted after `--down-s`;
- controller_kill: SIGKILL of the KRaft controller leader (from the nodes' quorum-state
  files), restarted after `--down-s`; `election_s`: until another node leads;
- replica_kill: SIGKILL of replica 2 of the counted job's shard (not a land worker's entry
  node), restarted after `--down-s`; `replica_caught_up_s`: from its restart until it holds
  every key its peer held at that moment (caught up through replication);
- zookeeper_down: SIGKILL of ZooKeeper, back after `--zk-down-s`: replicated tables turn
  read-only, the land workers' inserts fail (`land_write_failures` logged) and are retried;
- workers_kill: SIGKILL of one detect and one land worker, restarted at once;
- broker_stop: SIGSTOP of a broker for `--stop-s` (a partition: the process holds its
  sockets and answers nothing), then SIGCONT.

Per case, besides bench/chaos.py's figures: `alert_p99_outage_s` (probe steps emitted while
the fault lasted; for the broker cases the target is <= 5 s), `alert_p99_s` (the whole case),
`recovery_s` (from the fault's end - the service back, or the workers restarted - until the
affected workers committed everything in their topics at that moment), `isr_full_s` (broker
cases: from the restart or SIGCONT until every partition of the rig's topics has 3 in-sync
replicas again) and `replicas_agree` (both replicas of each shard hold the same keys at the end).

Writes bench/results/chaos-cluster.json (chaos.json's keys plus `topology`: brokers,
replication factor, min ISR, shards x replicas, workers per role, measured on the running
cluster) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from kafka import KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from bench.chaos import (
    DETECT_DECODE_TOPICS,
    LAND_TOPICS,
    Harness,
    Offsets,
    Rig,
    Sent,
    emit_job,
    log,
    poll_until,
    read_alerts,
    recovery_after,
    repeated_opens,
    role_groups,
    run_cases,
    summarize,
    table,
)
from bench.provenance import git_commit, machine
from infra.clients import kafka_client_config, request_timeout_ms
from infra.launcher import InfraConfig
from infra.launcher.clickhouse_cluster import CLUSTER_NAME
from infra.launcher.cluster import Cluster
from infra.launcher.supervision import kill_and_wait
from infra.secrets import CLICKHOUSE_DEFAULT
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.simulator.catalogue import gc_pauses
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Topics
from sinks import open_backend
from sinks.migrations.runner import migrate
from streams.topics_admin import ensure_topics

RESULTS = REPO_ROOT / "bench" / "results" / "chaos-cluster.json"
WORKERS = (("detect", "detect1"), ("detect", "detect2"), ("land", "land1"), ("land", "land2"))
PARTITIONS = 4
PACE_S = 0.05
WARM_S = 12.0
TAIL_S = 20.0
PROBE_FIRST = 20
PROBE_EVERY = 10
PROBE_PAUSE_SHARE = 0.66  # a GC pause of 66 % of the probe job's nominal step (≈ 2.5 s of its ≈ 3.8 s): a slow step
SLOW_RANK = 5
ALERT_TARGET_S = 5.0
BROKER_CASES = ("broker_kill", "controller_kill", "broker_stop")
CASES = ("broker_kill", "controller_kill", "replica_kill", "zookeeper_down", "workers_kill", "broker_stop")
COLUMNS = ("sent", "landed", "lost", "duplicates", "duplicate_incidents", "incidents_left_open", "alert_p99_outage_s",
           "alert_p99_s", "alerts_missed", "recovery_s", "isr_full_s", "replicas_agree", "workers_alive", "caught_up")


# --- pure parts ------------------------------------------------------------------------------------
def controller_leader(states: Iterable[Mapping[str, Any]]) -> tuple[int, int] | None:
    """(leader id, epoch) of the newest KRaft election the nodes' quorum-state files record.

    Each voter rewrites its file when it learns of an election; a node that was down keeps an
    old epoch, so the highest epoch names the current leader. None when no file names one.
    """
    best: tuple[int, int] | None = None
    for state in states:
        leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
        if leader >= 0 and (best is None or epoch > best[1]):
            best = (leader, epoch)
    return best


def topology_summary(brokers: int, replicas: Iterable[int], min_isr: Iterable[int],
                     shard_replicas: Iterable[tuple[int, int]], workers: Iterable[str],
                     partitions: Iterable[int]) -> dict[str, Any]:
    """The deployment a run measured: `replicas` per partition and `min_isr` per topic as the brokers
    describe them, (shard, replica) rows of ClickHouse's `system.clusters`, the worker names
    (role + number) and the partition count per topic. A spread (min != max) shows as a range."""

    def one(values: Iterable[int]) -> int | str | None:
        vals = sorted(set(values))
        if not vals:
            return None
        return vals[0] if len(vals) == 1 else f"{vals[0]}-{vals[-1]}"

    rows = list(shard_replicas)
    per_shard: dict[int, int] = {}
    for shard, _ in rows:
        per_shard[shard] = per_shard.get(shard, 0) + 1
    roles: dict[str, int] = {}
    for name in workers:
        role = name.rstrip("0123456789")
        roles[role] = roles.get(role, 0) + 1
    return {"brokers": brokers, "replication_factor": one(replicas), "min_insync_replicas": one(min_isr),
            "partitions": one(partitions), "shards": len(per_shard), "replicas_per_shard": one(per_shard.values()),
            "workers_per_role": dict(sorted(roles.items()))}


def latency_stats(sent_at: Mapping[int, float], seen: Mapping[int, float],
                  window: tuple[float, float] | None = None) -> dict[str, Any]:
    """Alert latency over the probe steps emitted (`sent_at`: step -> wall time) within `window`
    (all of them when None): p50, p99, max and how many got no alert (`seen`: step -> arrival)."""
    steps = [s for s, t in sent_at.items() if window is None or window[0] <= t <= window[1]]
    lat = [seen[s] - sent_at[s] for s in steps if s in seen]
    missed = sum(1 for s in steps if s not in seen)

    def pct(q: float) -> float | None:
        return round(float(np.percentile(lat, q)), 3) if lat else None

    return {"probes": len(steps), "p50_s": pct(50), "p99_s": pct(99),
            "max_s": round(max(lat), 3) if lat else None, "missed": missed}


def cluster_summary(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """chaos.json's totals plus the cluster's own: the worst alert p99 while a broker was down or
    stopped and whether it met the 5 s target (a broker case without a figure does not), and
    each case's recovery."""
    broker = {n: c.get("alert_p99_outage_s") for n, c in cases.items() if n in BROKER_CASES and "error" not in c}
    figures = [v for v in broker.values() if v is not None]
    return {
        **summarize({n: dict(c) for n, c in cases.items()}),
        "alert_p99_broker_down_s": max(figures) if figures else None,
        "alerts_within_5s": bool(broker) and len(figures) == len(broker) and max(figures) <= ALERT_TARGET_S,
        "alerts_missed_total": sum(int(c.get("alerts_missed", 0) or 0) for c in cases.values()),
        "recovery_s": {n: c.get("recovery_s") for n, c in cases.items()},
    }


# --- live parts -------------------------------------------------------------------------------------
class AlertClock:
    """Arrival time of the first SLOW_STEP alert (open or update) per `step_last` of one job, read live.

    The consumer is rebuilt after any error (a broker going away mid-fetch).
    """

    def __init__(self, settings: Settings, topic: str, job: str) -> None:
        self.settings, self.topic, self.job = settings, topic, job
        self.seen: dict[int, float] = {}
        self.detected: dict[int, float] = {}  # step -> the incident's detected_ns (the engine's wall clock), s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"alerts-{job}", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer: KafkaConsumer | None = None
            try:
                # an alert reader's request timeout (the admin principal keeps kafka-python's 30 s): a fetch
                # from a broker that stopped answering would hold the incidents it leads for 30 s
                # kafka-python bootstraps from one address picked at random and waits on it up to the
                # whole bootstrap_timeout_ms (30 s): a rebuild while a broker hangs (broker_stop) that
                # picked it held every alert until SIGCONT (31 s). Bounded, the next rebuild picks again.
                consumer = KafkaConsumer(self.topic, **kafka_client_config(self.settings, "admin"),
                                         request_timeout_ms=request_timeout_ms(self.settings),
                                         bootstrap_timeout_ms=2 * request_timeout_ms(self.settings),
                                         auto_offset_reset="earliest", enable_auto_commit=False,
                                         consumer_timeout_ms=200)
                while not self._stop.is_set():
                    for msg in consumer:
                        self._note(msg.value, time.time())
            except Exception:
                self._stop.wait(0.5)
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()

    def _note(self, value: bytes, now: float) -> None:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, dict) or doc.get("job") != self.job or doc.get("step_last") is None:
            return
        if "SLOW_STEP" in (doc.get("rules") or [doc.get("rule")]) and doc.get("state") in ("open", "update"):
            self.seen.setdefault(int(doc["step_last"]), now)
            if isinstance(doc.get("detected_ns"), int):
                self.detected.setdefault(int(doc["step_last"]), doc["detected_ns"] / 1e9)


@dataclass
class Outage:
    """What a case did: when the fault began and ended (monotonic and wall clock), which worker roles
    must catch up after it, and figures of its own."""

    t_down: float
    t_up: float
    wall_down: float
    wall_up: float
    roles: tuple[str, ...] = ("detect", "land")
    recovery_s: float | None = None  # set by a case that measures its own (workers_kill)
    extra: dict[str, Any] = field(default_factory=dict)


class Clock:
    """Both clocks at one moment."""

    def __init__(self) -> None:
        self.mono, self.wall = time.monotonic(), time.time()


@dataclass
class ClusterHarness(Harness):
    cluster: Cluster | None = None
    down_s: float = 30.0
    zk_down_s: float = 60.0
    stop_s: float = 30.0
    topology: dict[str, Any] = field(default_factory=dict)
    _agree: dict[str, bool] = field(default_factory=dict)

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None
        return self.cluster

    # --- rigs, workers, the cluster's state ---------------------------------------------------------
    def rig(self, name: str, server_url: str = "") -> Rig:
        """A rig on the cluster: replicated topics of 4 partitions, its own database migrated once
        (`ON CLUSTER`, before two land workers race to do it)."""
        home = self.run_dir / name
        home.mkdir(parents=True, exist_ok=True)
        stamp = self.run_dir.name.replace("-", "")
        settings = replace(self.c.client_settings(), home=home, topic_prefix=f"cc{stamp}{name}.",
                           app_id=f"cc{stamp}{name}", topic_partitions=PARTITIONS,
                           clickhouse_database=f"cc_{stamp}_{name}")
        ensure_topics(settings, Topics(settings.topic_prefix), settings.topic_partitions)
        backend = open_backend(settings)
        try:
            migrate(backend, cluster=settings.clickhouse_cluster)
        finally:
            backend.close()
        return Rig(name, settings, self.run_dir)

    def worker_env(self, name: str) -> dict[str, str]:
        """land2 enters the cluster through shard 2's first replica; the others use the rig's (s1r1)."""
        return {"STEPLENS_CLICKHOUSE_URL": self.c.clickhouse.node(2, 1).url} if name == "land2" else {}

    def start_workers(self, rig: Rig) -> None:
        for role, name in WORKERS:
            rig.start(role, name, env=self.worker_env(name))
        if not rig.wait_ready(tuple(name for _, name in WORKERS)):
            raise RuntimeError(f"workers not ready; logs in {self.run_dir}")

    def heal(self) -> None:
        """Everything running and answering again (a failed case must not leave a node down or stopped)."""
        for node in self.c.kafka.nodes:
            if (pid := node.pid()) is not None:
                node.signal(pid, signal.SIGCONT)
        self.c.start()

    def rows(self, shard: int, replica: int, sql: str) -> list[tuple[Any, ...]]:
        """`sql` on one replica itself (not through the Distributed tables), as `default`."""
        from clickhouse_driver import Client  # type: ignore[import-untyped,unused-ignore]

        node = self.c.clickhouse.node(shard, replica)
        client = Client(host="127.0.0.1", port=node.tcp_port, user=CLICKHOUSE_DEFAULT,
                        password=node.password(CLICKHOUSE_DEFAULT), connect_timeout=5, send_receive_timeout=30)
        try:
            return [tuple(row) for row in client.execute(sql)]
        finally:
            client.disconnect()

    def ask(self, shard: int, replica: int, sql: str) -> int:
        return int(self.rows(shard, replica, sql)[0][0])

    def keys(self, rig: Rig, shard: int, replica: int) -> int:
        db = rig.settings.clickhouse_database
        return self.ask(shard, replica, f"SELECT (SELECT uniqExact(job, step, rank) FROM `{db}`.`steps_local`)"
                                        f" + (SELECT uniqExact(job, phase) FROM `{db}`.`jobs_local`)")

    def job_shard(self, job: str) -> int:
        """The shard the Distributed tables put `job` on: cityHash64(job) over the 2 shards of weight 1."""
        return self.ask(1, 1, f"SELECT cityHash64('{job}') % 2") + 1

    def before_count(self, rig: Rig) -> None:
        """Wait (60 s at most) until both replicas of each shard hold the same keys: a read through the
        Distributed tables may pick either."""
        def agree() -> bool:
            return all(self.keys(rig, s, 1) == self.keys(rig, s, 2) for s in (1, 2))

        self._agree[rig.name] = poll_until(agree, 60.0, every=1.0)

    def admin(self, rig: Rig) -> KafkaAdminClient:
        return KafkaAdminClient(**kafka_client_config(rig.settings, "admin"), client_id="steplens-chaos-cluster")

    def rig_topics(self, rig: Rig) -> list[str]:
        return [getattr(rig.topics, n) for n in sorted({*DETECT_DECODE_TOPICS, *LAND_TOPICS})]

    def isr_full(self, rig: Rig) -> bool:
        admin = self.admin(rig)
        try:
            described = admin.describe_topics(self.rig_topics(rig))
        finally:
            admin.close()
        parts = [p for t in described for p in t["partitions"]]
        return bool(parts) and all(len(p["isr_nodes"]) == len(p["replica_nodes"]) for p in parts)

    def cluster_partitions(self, rig: Rig) -> int:
        """Partitions of every topic on the cluster (a killed broker's successors take over a third
        of the leaderships: failover time grows with them)."""
        admin = self.admin(rig)
        try:
            return sum(len(t["partitions"]) for t in admin.describe_topics(list(admin.list_topics())))
        finally:
            admin.close()

    def note_topology(self, rig: Rig) -> None:
        """Measure the deployment once, on the first rig, while its workers run."""
        if self.topology:
            return
        names = self.rig_topics(rig)
        admin = self.admin(rig)
        try:
            brokers = [b for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
            described = admin.describe_topics(names)
            configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                             config_filter="all")
        finally:
            admin.close()
        min_isr = [int(c["min.insync.replicas"]["value"]) for c in configs["topic"].values()]
        shard_rows = [(int(sh), int(r)) for sh, r in self.rows(
            1, 1, f"SELECT shard_num, replica_num FROM system.clusters WHERE cluster = '{CLUSTER_NAME}'")]
        self.topology = topology_summary(
            len(brokers), [len(p["replica_nodes"]) for t in described for p in t["partitions"]], min_isr, shard_rows,
            rig.procs, [len(t["partitions"]) for t in described])

    def quorum_states(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for node in self.c.kafka.nodes:
            path = node.data_dir / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(path.read_text()))
        return out

    def leader(self) -> tuple[int, int] | None:
        return controller_leader(self.quorum_states())

    def follower_broker(self) -> int:
        """A broker that is not the KRaft leader (the broker case keeps the controller out of it)."""
        lead = self.leader()
        return next(n.node for n in self.c.kafka.nodes if lead is None or n.node != lead[0])

    # --- one case -------------------------------------------------------------------------------------
    def paced(self, name: str, outage_s: float, disrupt: Callable[[Rig, Offsets, str], Outage]) -> dict[str, Any]:
        """Run `disrupt` under the two jobs' paced load on a fresh rig, then count everything."""
        self.heal()
        rig = self.rig(name)
        offsets = Offsets(rig.settings)
        steps = int((WARM_S + outage_s + TAIL_S) / PACE_S)
        job = self.job(name, steps=steps, slow_rank=SLOW_RANK)
        probe_topo = Topology(dp=4, tp=2, pp=1)
        pause_ms = PROBE_PAUSE_SHARE * FleetJob("probe", probe_topo, 1).nominal_ms
        probe = FleetJob(f"chaos-{name}-probe", probe_topo, steps,
                         gc_pauses(probe_topo, range(PROBE_FIRST, steps, PROBE_EVERY), pause_ms), 12)
        probe_steps = set(range(PROBE_FIRST, steps, PROBE_EVERY))
        sent, sent_probe = Sent(), Sent()
        sent_at: dict[int, float] = {}

        def stamp(i: int) -> None:
            if i in probe_steps:
                sent_at[i] = time.time()

        clock = AlertClock(rig.settings, rig.topics.incidents, probe.job_id)
        halt = threading.Event()
        producers = [threading.Thread(target=emit_job, args=(rig, job, sent, PACE_S, halt), daemon=True),
                     threading.Thread(target=emit_job, args=(rig, probe, sent_probe, PACE_S, halt),
                                      kwargs={"on_step": stamp}, daemon=True)]
        try:
            self.start_workers(rig)
            self.note_topology(rig)
            partitions = self.cluster_partitions(rig)
            clock.start()
            for t in producers:
                t.start()
            time.sleep(WARM_S)
            try:
                out = disrupt(rig, offsets, job.job_id)
            finally:
                self.heal()
            recovery = out.recovery_s if out.recovery_s is not None else recovery_after(rig, offsets, out.roles,
                                                                                         out.t_up)
            log(f"{name}: recovery {recovery} s")
            for t in producers:
                t.join(timeout=900)
        except BaseException:  # a broken case leaves no worker, producer or reader behind for the next
            halt.set()
            rig.stop()
            offsets.close()
            if clock.started:
                clock.stop()
            raise
        sent.merge(sent_probe)
        try:
            result = self.finish(rig, offsets, sent, job, {"recovery_s": recovery, **out.extra})
        finally:
            clock.stop()
        probe_alerts, _ = read_alerts(rig, probe.job_id)
        probe_repeats = repeated_opens(probe_alerts)
        during = latency_stats(sent_at, clock.seen, (out.wall_down, out.wall_up))
        whole = latency_stats(sent_at, clock.seen)
        # where the time went: emitted -> detected by the engine (the rest is the outputs' way to the reader)
        detected = latency_stats(sent_at, clock.detected, (out.wall_down, out.wall_up))
        # each probe: seconds from the fault's start, alert latency, emitted -> detected (None: no alert)
        timeline = [[round(t - out.wall_down, 2),
                     round(clock.seen[s] - t, 3) if s in clock.seen else None,
                     round(clock.detected[s] - t, 3) if s in clock.detected else None]
                    for s, t in sorted(sent_at.items())]
        result.update(
            alert_timeline=timeline,
            duplicate_incidents=result["duplicate_incidents"] + probe_repeats, probe_duplicate_opens=probe_repeats,
            outage_s=round(out.t_up - out.t_down, 1), alert_p99_outage_s=during["p99_s"], alert_outage=during,
            alert_p99_s=whole["p99_s"], alert=whole, alerts_missed=whole["missed"], detected_outage=detected,
            replicas_agree=self._agree.get(rig.name, False), workers=sorted(rig.procs),
            cluster_partitions=partitions)
        return result

    def _window(self, start: Clock, roles: tuple[str, ...] = ("detect", "land"), **extra: Any) -> Outage:
        end = Clock()
        return Outage(start.mono, end.mono, start.wall, end.wall, roles, extra=extra)

    # --- the cases ------------------------------------------------------------------------------------
    def _broker_down(self, rig: Rig, node: int) -> tuple[Clock, Clock]:
        start = Clock()
        self.c.kafka.kill_node(node, signal.SIGKILL)
        time.sleep(max(self.down_s - (time.monotonic() - start.mono), 0))
        self.c.kafka.start_node(node)
        return start, Clock()

    def case_broker_kill(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        node = self.follower_broker()
        log(f"broker_kill: SIGKILL of broker {node} for {self.down_s:.0f} s")
        start, up = self._broker_down(rig, node)
        isr = poll_until(lambda: self.isr_full(rig), 180.0, every=0.5)
        return Outage(start.mono, up.mono, start.wall, up.wall, extra={
            "broker": node, "isr_full_s": round(time.monotonic() - up.mono, 2) if isr else None})

    def case_controller_kill(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        before = self.leader()
        if before is None:
            raise RuntimeError("no KRaft leader in the nodes' quorum-state files")
        log(f"controller_kill: SIGKILL of the KRaft leader, node {before[0]} (epoch {before[1]})")
        start = Clock()
        self.c.kafka.kill_node(before[0], signal.SIGKILL)
        elected = poll_until(lambda: (lead := self.leader()) is not None and lead[1] > before[1]
                             and lead[0] != before[0], 60.0, every=0.1)
        election = round(time.monotonic() - start.mono, 2) if elected else None
        after = self.leader()
        time.sleep(max(self.down_s - (time.monotonic() - start.mono), 0))
        self.c.kafka.start_node(before[0])
        up = Clock()
        isr = poll_until(lambda: self.isr_full(rig), 180.0, every=0.5)
        return Outage(start.mono, up.mono, start.wall, up.wall, extra={
            "controller": before[0], "new_controller": after[0] if after else None, "election_s": election,
            "isr_full_s": round(time.monotonic() - up.mono, 2) if isr else None})

    def case_replica_kill(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        shard = self.job_shard(job)
        log(f"replica_kill: SIGKILL of ClickHouse s{shard}r2 for {self.down_s:.0f} s")
        before = self.keys(rig, shard, 2)
        start = Clock()
        self.c.clickhouse.kill_node(shard, 2, signal.SIGKILL)
        time.sleep(self.down_s)
        self.c.clickhouse.start_node(shard, 2)
        up = Clock()
        target, at_ready = self.keys(rig, shard, 1), self.keys(rig, shard, 2)
        fetched = poll_until(lambda: self.keys(rig, shard, 2) >= target, 180.0, every=0.5)
        # keys the replica held before the kill, when it answered again (start-up fetches from its peer
        # already) and the peer's at that moment: what it had to fetch through replication
        return Outage(start.mono, up.mono, start.wall, up.wall, ("land",), extra={
            "replica": f"s{shard}r2", "replica_caught_up_s": round(time.monotonic() - up.mono, 2) if fetched else None,
            "replica_keys": {"before_kill": before, "when_answering": at_ready, "peer_at_return": target}})

    def case_zookeeper_down(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        log(f"zookeeper_down: SIGKILL of ZooKeeper for {self.zk_down_s:.0f} s")
        before = self.land_failures(rig)
        start = Clock()
        kill_and_wait(self.c.zookeeper, signal.SIGKILL)
        time.sleep(self.zk_down_s)
        self.c.zookeeper.start()
        up = Clock()
        return Outage(start.mono, up.mono, start.wall, up.wall, ("land",), extra={
            "land_write_failures": self.land_failures(rig) - before})

    def land_failures(self, rig: Rig) -> int:
        """Failed inserts the land workers logged (each is retried; the batch stays uncommitted)."""
        total = 0
        for _, name in WORKERS:
            if name.startswith("land"):
                with contextlib.suppress(OSError):
                    total += (rig.logs / f"{rig.name}-{name}.log").read_text(errors="replace").count("landing failed")
        return total

    def case_workers_kill(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        log("workers_kill: SIGKILL of detect1 and land1, restarted at once")
        start = Clock()
        for name in ("detect1", "land1"):
            rig.kill(name)
        for name in ("detect1", "land1"):
            rig.start(name.rstrip("0123456789"), name, env=self.worker_env(name))
        up = Clock()
        # what is in the topics after the kill: committed once the group has rebalanced and read it
        targets = {g: offsets.ends(names) for role in ("detect", "land") for g, names in role_groups(rig, role).items()}
        ok = poll_until(lambda: all(offsets.covered(g, e) for g, e in targets.items()), 180.0, every=0.25)
        recovery = round(time.monotonic() - start.mono, 2) if ok else None
        return Outage(start.mono, start.mono + (recovery or 0.0), start.wall, start.wall + (recovery or 0.0),
                      recovery_s=recovery, extra={"killed": ["detect1", "land1"],
                                                  "restarted_in_s": round(up.mono - start.mono, 2)})

    def case_broker_stop(self, rig: Rig, offsets: Offsets, job: str) -> Outage:
        node = self.c.kafka.nodes[self.follower_broker() - 1]
        pid = node.pid()
        if pid is None:
            raise RuntimeError(f"broker {node.node} does not run")
        log(f"broker_stop: SIGSTOP of broker {node.node} for {self.stop_s:.0f} s")
        start = Clock()
        node.signal(pid, signal.SIGSTOP)
        try:
            time.sleep(self.stop_s)
        finally:
            node.signal(pid, signal.SIGCONT)
        up = Clock()
        isr = poll_until(lambda: self.isr_full(rig), 180.0, every=0.5)
        return Outage(start.mono, up.mono, start.wall, up.wall, extra={
            "broker": node.node, "isr_full_s": round(time.monotonic() - up.mono, 2) if isr else None})

    def runners(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return {
            "broker_kill": lambda: self.paced("broker_kill", self.down_s, self.case_broker_kill),
            "controller_kill": lambda: self.paced("controller_kill", self.down_s, self.case_controller_kill),
            "replica_kill": lambda: self.paced("replica_kill", self.down_s, self.case_replica_kill),
            "zookeeper_down": lambda: self.paced("zookeeper_down", self.zk_down_s, self.case_zookeeper_down),
            "workers_kill": lambda: self.paced("workers_kill", 20.0, self.case_workers_kill),
            "broker_stop": lambda: self.paced("broker_stop", self.stop_s, self.case_broker_stop),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--update", action="store_true", help="replace only these cases in an existing --out file")
    parser.add_argument("--down-s", type=float, default=30.0, help="how long a killed broker or replica stays down")
    parser.add_argument("--zk-down-s", type=float, default=60.0, help="how long ZooKeeper stays down")
    parser.add_argument("--stop-s", type=float, default=30.0, help="how long a broker stays SIGSTOPped")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    parser.add_argument("--fresh", action="store_true",
                        help="stop and wipe the loopback cluster first (`python -m infra.launcher wipe --cluster`): "
                        "the cases run on a cluster holding only their own topics")
    args = parser.parse_args(argv)
    cfg = InfraConfig.from_env()
    cluster = Cluster(cfg)
    if args.fresh:
        cluster.stop()
        cluster.wipe()
    started_cluster = any(cluster.start().values())
    base = load_settings()
    started = datetime.now(UTC)
    run_dir = base.home / "chaos-cluster" / started.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    harness = ClusterHarness(base, cfg, run_dir, False, cluster=cluster, down_s=args.down_s,
                             zk_down_s=args.zk_down_s, stop_s=args.stop_s)
    cases: dict[str, dict[str, Any]] = {}
    previous: dict[str, Any] = {}
    if args.update and args.out.exists():
        previous = json.loads(args.out.read_text())
        cases.update(previous.get("cases", {}))
    try:
        run_cases(harness.runners(), args.cases.split(","), cases, run_dir)
    finally:
        with contextlib.suppress(Exception):
            harness.heal()
        if started_cluster and not args.keep:
            cluster.stop()
    result = {
        "cases": cases,
        **cluster_summary(cases),
        "quick": False,
        "fresh_cluster": args.fresh,
        "topology": harness.topology or previous.get("topology", {}),
        "outages_s": {"broker_and_replica": args.down_s, "zookeeper": args.zk_down_s, "broker_sigstop": args.stop_s},
        "machine": machine(),
        "started": started.isoformat(),
        "git": git_commit(),
        "logs": str(run_dir),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(cases, COLUMNS))
    failed = result["failed_cases"]
    print(f"topology {json.dumps(result['topology'])}")
    print(f"lost_total {result['lost_total']}  duplicates_total {result['duplicates_total']}  "
          f"duplicate_incidents_total {result['duplicate_incidents_total']}  "
          f"alert p99 with a broker down {result['alert_p99_broker_down_s']} s  "
          f"-> {args.out}" + (f"  FAILED CASES: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
