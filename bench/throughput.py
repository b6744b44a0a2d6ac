"""`make bench-throughput`: the largest simulated job this machine sustains at 1 step/s, end to end.

For each job size (ranks, ascending) a fresh set of topics, a detect worker and a land
worker (embedded chdb) run while this process plays a job at 1 step/s: every rank sends
its step event, its kernel summary and a device sample each second. Every 10th step (from
step 15) all ranks pause 300 ms for GC, a slow step the engine must report; detection
latency = alert received - the step's last event sent. A size passes when the producer
kept pace, nothing was lost (every step evaluated with every rank; every step row landed)
and p99 latency <= 5 s. The same run measures a plain kafka-python consumer + orjson
reading the same topics (the ceiling: the median of `CEILING_READS` reads, each ~6 s at 10,240 ranks) and
CPU-us per event of each stage.

Packed (default, contract 1.2): the producer models a node agent and sends one host's
events of one topic and one step as one record (a JSON array keyed `job/host`; device
samples keyed `host`). `--unpacked-ranks` also runs sizes with one record per event (the
1.1 form: what a rank hook without packing sends) for a side-by-side figure. Every count
(events/s, µs per event, the ceiling) is in EVENTS, whatever the records hold.

Per-stage ratios (`stage_ratio_to_ceiling`): ceiling µs/event ÷ stage µs/event for detect and
land, from the same trial, so runs on faster and slower machines compare (1.0 = the stage
costs what a plain consumer pays to read and parse the same events). `--find-max START`
replaces the fixed size list: sizes grow ×1.25 from START until one fails, and `max_ranks`
is the largest that passed.

Scale-out (`--workers 1,2`, `make bench-scaleout`): the sizes through 1, then 2 workers of each
role, landing in one ClickHouse server; with `--cluster` (`make bench-scaleout-cluster`) through
`python -m infra.launcher up --cluster` instead: 3 brokers (RF 3, min ISR 2, every broker's CPU counted)
and ClickHouse 2 shards x 2 replicas (land workers entering through each shard, inserting
through the Distributed tables).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.partitioner.default import murmur2

from bench.provenance import git_commit, machine
from infra import kafka_records
from infra.clients import kafka_client_config
from infra.files import private_dir
from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker
from infra.launcher.cluster import Cluster
from infra.progress import Progress
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.sampler.procfs import process_cpu_ticks
from producers.simulator.topology import Topology
from schemas import Topics, rank_key
from sinks import open_backend
from sinks.migrations.runner import migrate
from steplens.demo import start_worker, stop_worker, worker_env
from steplens.lag import wait_group_caught_up
from streams.detect.state.store import SnapshotStore
from streams.metrics import kafka_has_c_crc32c
from streams.topics_admin import DetectTopics, ensure_topics, expire_topics

RESULTS = REPO_ROOT / "bench" / "results" / "throughput.json"
RESULTS_SCALEOUT = REPO_ROOT / "bench" / "results" / "throughput-scaleout.json"
RESULTS_SCALEOUT_CLUSTER = REPO_ROOT / "bench" / "results" / "throughput-scaleout-cluster.json"
T0_NS = 1_767_225_600_000_000_000
TICKS = os.sysconf("SC_CLK_TCK")
CEILING_READS = 3  # the plain-consumer ceiling is read this many times a trial; the median read counts


def cpu_s(pid: int) -> float:
    return process_cpu_ticks(pid) / TICKS


def group_cpu_s(pgid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds of every live process in process group `pgid`: a worker (started in a session of its own)
    and the processes it started (the detect worker's decode process)."""
    ticks = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / TICKS


class Job:
    """Pre-built identities; events are built per step as dicts (no dataclasses on the hot path)."""

    def __init__(self, job: str, ranks: int) -> None:
        tp = 8 if ranks >= 64 else 2
        pp = 2
        self.job = job
        self.topo = Topology(dp=ranks // (tp * pp), tp=tp, pp=pp)
        self.world = self.topo.world
        self.ids = [{"job": job, "rank": r, "world": self.world, "host": self.topo.host(r),
                     "device": self.topo.device(r),
                     "domains": {k: {"group": d.group, "size": d.size, "index": d.index}
                                 for k, d in self.topo.domains(r).items()}} for r in range(self.world)]
        self.rng = np.random.default_rng(0)
        self.host_keys = [f"{job}/{self.topo.host(r)}".encode() for r in range(self.world)]

    def step(self, s: int, gc_ms: float, packed: bool = True, device_ts_ns: int | None = None
             ) -> list[tuple[str, bytes, bytes]]:
        """Step `s`'s records. Device samples are stamped with the wall clock (the live bench paces a step a
        second, so each second's samples make one tick), or with `device_ts_ns`: a job played in process at
        once must give its steps' samples their own seconds, else every step's samples fall into one or two
        ticks that stay held and are never judged (the engine's device work and its snapshot's held ticks
        then look nothing like a live worker's)."""
        n = self.world
        noise = self.rng.lognormal(0, 0.015, size=(4, n))
        fwd, bwd = 120 * noise[0], 240 * noise[1]
        busy = 20 + fwd + bwd + 30 + gc_ms + 2
        slowest = float(busy.max())
        start = T0_NS + s * 1_000_000_000
        end = start + int((slowest + 40) * 1e6)
        wait = ((slowest - busy) + 40).tolist()
        fwd_l, bwd_l = fwd.tolist(), bwd.tolist()
        n2, n3 = noise[2].tolist(), noise[3].tolist()
        out: list[tuple[str, bytes, bytes]] = []
        ts = time.time_ns() if device_ts_ns is None else device_ts_ns
        for r in range(n):
            ident = self.ids[r]
            key = rank_key(self.job, r)
            out.append(("steps", key, orjson.dumps({
                "type": "step", "v": "1.1", **ident, "step": s, "start_ns": start, "end_ns": end,
                "phases": {"data_ms": 20.0, "forward_ms": fwd_l[r], "backward_ms": bwd_l[r], "optimizer_ms": 30.0,
                           "comm_exposed_ms": wait[r], "interstep_cpu_ms": 2.0, "gc_ms": gc_ms},
                "batch_size": 1, "samples": 8})))
            out.append(("kernels", key, orjson.dumps({
                "type": "kernel_summary", "v": "1.1", **ident, "step": s, "other_ns": 5_000_000,
                "entries": [
                    {"key": "F2:4096x4096x4096", "cat": "compute", "count": 40,
                     "total_ns": int((fwd_l[r] + bwd_l[r]) * 9e5),
                     "flops": 40 * 2 * 4096.0 ** 3, "launch_mean_us": 8.0 * n2[r], "launch_mad_us": 1.0},
                    {"key": "allreduce/dp", "cat": "comm", "op": "allreduce", "domain": "dp", "count": 4,
                     "total_ns": int(30e6 * n3[r]), "bytes": 400_000_000}]})))
            out.append(("device", f"{ident['host']}/{ident['device']}".encode(), orjson.dumps({
                "type": "device", "v": "1.1", "host": ident["host"], "device": ident["device"], "ts_ns": ts,
                "job": self.job, "rank": r, "power_w": 350.0 + n2[r], "temp_c": 60.0 + n3[r],
                "aicore_pct": 80.0, "mem_pct": 70.0, "membw_pct": 60.0})))
        return self.pack(out) if packed else out

    def pack(self, out: list[tuple[str, bytes, bytes]]) -> list[tuple[str, bytes, bytes]]:
        """One record per host per topic: a JSON array of the host's events in emission order."""
        groups: dict[tuple[str, bytes], list[bytes]] = {}
        for kind, key, value in out:
            head, _, tail = key.rpartition(b"/")
            pack_key = head if kind == "device" else self.host_keys[int(tail)]
            groups.setdefault((kind, pack_key), []).append(value)
        return [(kind, key, b"[" + b",".join(values) + b"]") for (kind, key), values in groups.items()]


class Partitions:
    """The default partitioner's choice (murmur2 of the key), computed once per key instead of per send.

    The simulator stands in for thousands of rank hooks; kafka-python hashes every key in pure
    Python (~4 µs a message), which here would be paid 30k times a second for the same 20k keys.
    Same partitions as `DefaultPartitioner`, so per-rank ordering and spread are unchanged.
    """

    def __init__(self, partitions: list[int]) -> None:
        self._partitions = sorted(partitions)
        self._of: dict[bytes, int] = {}

    def __call__(self, key: bytes) -> int:
        part = self._of.get(key)
        if part is None:
            part = self._of[key] = self._partitions[(murmur2(key) & 0x7FFFFFFF) % len(self._partitions)]
        return part


def alerts_listener(settings: Settings, topic: str, seen: dict[int, float], stop: threading.Event) -> None:
    consumer = KafkaConsumer(topic, **kafka_client_config(settings, "reader"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=200)
    while not stop.is_set():
        for msg in consumer:
            doc = orjson.loads(msg.value)
            if "SLOW_STEP" in (doc.get("rules") or [doc.get("rule")]) and doc.get("state") in ("open", "update"):
                seen.setdefault(int(doc["step_last"]), time.time())
    consumer.close()


def ceiling(settings: Settings, topics: list[str], total: int) -> dict[str, float]:
    """A plain kafka-python consumer + orjson over the same topics (an array's elements each count).

    The rate is timed from the first record, so the consumer's connect (TLS, SASL, metadata,
    offsets: a fixed cost, most of a small trial's read) does not pose as per-event cost; the
    start-up and the reader's CPU per event are reported beside it. It reads with kafka-python's own record
    reader: the C one the workers install (infra/kafka_records.py) is part of what the ratios measure.
    """
    if kafka_records.installed():
        raise RuntimeError("the plain-consumer ceiling must read with kafka-python's own record reader")
    consumer = KafkaConsumer(*topics, **kafka_client_config(settings, "admin"), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000, max_poll_records=5000)
    seen = n = 0
    t_open = time.perf_counter()
    t_first = cpu_first = 0.0
    for msg in consumer:
        doc = orjson.loads(msg.value)
        events = len(doc) if type(doc) is list else 1
        seen += events
        if not t_first:  # the clock starts here; this record's events are not counted
            t_first, cpu_first = time.perf_counter(), time.process_time()
        else:
            n += events
        if seen >= total:
            break
    elapsed, cpu = time.perf_counter() - t_first, time.process_time() - cpu_first
    consumer.close()
    return {"events_per_s": n / elapsed if t_first and elapsed > 0 else 0.0,
            "startup_s": t_first - t_open if t_first else 0.0,
            "cpu_us_per_event": cpu / n * 1e6 if n else 0.0}


def median_read(reads: list[dict[str, float]]) -> dict[str, float]:
    """The read with the median rate. One ~6-s read was the noisiest figure of a trial: over six 10,240-rank
    trials in a row its µs/event ranged 4.86–6.06 (±11 %) while the producer's CPU per event, the same code
    each time, ranged 10.13–10.79 (±3 %); the stages are averaged over the whole trial."""
    return sorted(reads, key=lambda r: r["events_per_s"])[len(reads) // 2]


def stage_ratios(ceiling_events_per_s: float, cpu_us_per_event: dict[str, float],
                 stages: tuple[str, ...] = ("detect", "land")) -> dict[str, float | None]:
    """Ceiling µs/event ÷ stage µs/event per stage: machine speed cancels, so the figure travels.

    None where either side is missing or zero (no ceiling measured, a stage that used no CPU).
    """
    out: dict[str, float | None] = {}
    for stage in stages:
        us = cpu_us_per_event.get(stage)
        out[stage] = round(1e6 / ceiling_events_per_s / us, 4) if ceiling_events_per_s > 0 and us else None
    return out


def job_unit(ranks: int) -> int:
    """The granularity `Job` builds a world in (tp·pp ranks), so a requested size is the size run."""
    return 16 if ranks >= 64 else 4


def next_size(ranks: int, factor: float = 1.25) -> int:
    """`ranks` × factor rounded up to a whole job, always strictly larger."""
    grown = max(int(-(-ranks * factor // 1)), ranks + 1)
    unit = job_unit(grown)
    return -(-grown // unit) * unit


def find_max(passes: Callable[[int], bool], start: int, factor: float = 1.25,
             limit: int | None = None) -> dict[str, Any]:
    """Raise the size ×factor from `start` until `passes(size)` is false; the largest that passed.

    `limit` stops the climb (reported as `capped`) on a machine that would otherwise never fail.
    """
    tried: list[dict[str, Any]] = []
    best = 0
    size = -(-start // job_unit(start)) * job_unit(start)
    while limit is None or size <= limit:
        ok = bool(passes(size))
        tried.append({"ranks": size, "passed": ok})
        if not ok:
            break
        best = size
        size = next_size(size, factor)
    return {"max_ranks": best, "start": start, "factor": factor, "tried": tried,
            "capped": bool(tried) and tried[-1]["passed"]}


def partition_events(records: list[tuple[str, bytes, bytes]], topic_of: dict[str, str],
                     partition: Callable[[bytes], int], steps: int) -> dict[tuple[str, int], int]:
    """Events per (topic, partition) over the trial: one step's records (a packed record holds a JSON
    array; the same keys, so the same partitions and counts, every step) times `steps`."""
    out: dict[tuple[str, int], int] = {}
    for kind, key, value in records:
        doc = orjson.loads(value)
        where = (topic_of[kind], partition(key))
        out[where] = out.get(where, 0) + (len(doc) if type(doc) is list else 1) * steps
    return out


def worker_shares(members: dict[str, list[tuple[str, int]]],
                  events: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    """Each group member's partitions and its share of the events on the group's topics (the
    members in order of how much they took): an even spread is what more workers buy."""
    topics = {t for parts in members.values() for t, _ in parts}
    total = sum(n for (t, _), n in events.items() if t in topics)
    rows: list[dict[str, Any]] = []
    for parts in members.values():
        mine = sum(events.get(tp, 0) for tp in parts)
        rows.append({"partitions": len(parts), "events": mine, "share": round(mine / total, 3) if total else None})
    return sorted(rows, key=lambda r: (-r["events"], -r["partitions"]))


def group_assignment(settings: Settings, group: str) -> dict[str, list[tuple[str, int]]]:
    """Member id -> the (topic, partition)s the group's coordinator assigned it (kafka-python decodes
    the consumer protocol's assignment; a member of a non-consumer protocol shows none)."""
    admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-bench")
    try:
        described = admin.describe_groups([group]).get(group, {})
    finally:
        admin.close()
    out: dict[str, list[tuple[str, int]]] = {}
    for member in described.get("members", []):
        assignment = member.get("member_assignment")
        if hasattr(assignment, "partitions"):
            parts = [(tp.topic, tp.partition) for tp in assignment.partitions()]
        elif isinstance(assignment, dict):
            parts = [(a["topic"], int(p)) for a in assignment.get("assigned_partitions", []) for p in a["partitions"]]
        else:
            parts = []
        out[str(member.get("member_id"))] = sorted(parts)
    return out


def scaleout_summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Per worker count: the largest size that passed, and at the largest size every count passed
    (the same load through each) the events/s, CPU-µs per event per stage and the spread."""
    counts = sorted({int(t["workers"]) for t in trials})
    passed = {w: {int(t["ranks"]) for t in trials if t["workers"] == w and t["passed"]} for w in counts}
    common = set.intersection(*passed.values()) if passed else set()
    size = max(common) if common else None
    out: dict[str, Any] = {"max_ranks": {str(w): max(passed[w], default=0) for w in counts}, "common_ranks": size,
                           "at_common_ranks": {}}
    for w in counts:
        at = next((t for t in trials if t["workers"] == w and t["ranks"] == size and t["passed"]), None)
        if at is not None:
            out["at_common_ranks"][str(w)] = {
                "events_per_s": at["events_per_s"], "cpu_us_per_event": at["cpu_us_per_event"],
                "p99_latency_s": at["p99_latency_s"],
                **({"cpu_us_per_event_by_worker": at["cpu_us_per_event_by_worker"], "shares": at["shares"]}
                   if "shares" in at else {})}
    return out


def trial(base: Settings, ranks: int, steps: int, packed: bool = True, broker_pids: Sequence[int] = (),
          workers: int = 1, server_url: str = "", land_urls: Sequence[str] = ()) -> dict[str, Any]:
    """One size: `workers` processes of each role (landing into `server_url`'s ClickHouse server when set,
    embedded chdb otherwise, which allows one land process only). `land_urls`: the ClickHouse node
    each land worker enters through (a cluster's replicas; default `server_url`); `broker_pids`:
    every broker process whose CPU counts as the broker's."""
    name = f"tp{uuid.uuid4().hex[:8]}"
    home = base.home / "bench" / name
    home.mkdir(parents=True, exist_ok=True)
    settings = replace(base, home=home, secrets_dir=base.secrets_path, topic_prefix=f"{name}.", app_id=name,
                       chdb_path=home / "chdb", clickhouse_url=server_url, clickhouse_database=name)
    if workers > 1 and not server_url:
        raise ValueError("several land workers need a ClickHouse server (embedded chdb is one process per directory)")
    topics = Topics(settings.topic_prefix)
    internal = DetectTopics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    env = worker_env(settings)
    if server_url:  # migrated once (on the cluster: ON CLUSTER), before several land workers would race to do it
        backend = open_backend(settings)
        try:
            migrate(backend, cluster=settings.clickhouse_cluster)
        finally:
            backend.close()
    job = Job(f"bench-{ranks}", ranks)
    producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks=1, linger_ms=5,
                             batch_size=1 << 20, max_request_size=4 << 20)
    topic_of = {"steps": topics.steps, "kernels": topics.kernel_summaries, "device": topics.device}
    entry = {i: land_urls[(i - 1) % len(land_urls)] for i in range(1, workers + 1)} if land_urls else {}
    procs = {f"{role}{i}": start_worker(role, {**env, **({"STEPLENS_CLICKHOUSE_URL": entry[i]}
                                                          if role == "land" and i in entry else {})},
                                        private_dir(home / f"{role}{i}"))
             for role in ("detect", "land") for i in range(1, workers + 1)}
    seen: dict[int, float] = {}
    stop = threading.Event()
    listener = threading.Thread(target=alerts_listener, args=(settings, topics.incidents, seen, stop), daemon=True)
    listener.start()
    sent_at: dict[int, float] = {}
    behind = 0.0
    try:
        start_doc = {"type": "job", "v": "1.3", "job": job.job, "phase": "start", "world": job.world,
                     "ts_ns": T0_NS, "parallel": job.topo.parallel(), "kernel_summaries": True}
        producer.send(topics.jobs, key=job.job.encode(), value=orjson.dumps(start_doc))
        producer.flush()
        if not wait_group_caught_up(settings, f"{name}-detect-decode", [topics.jobs], 120):
            raise RuntimeError("detect worker did not start")
        # the land worker's start-up (chdb open, migrations) is not per-event cost: measure from ready
        if not wait_group_caught_up(settings, f"{name}-land", [topics.jobs], 120):
            raise RuntimeError("land worker did not start")
        counts = {len(producer.partitions_for(t)) for t in topic_of.values()}
        if len(counts) != 1:
            raise RuntimeError(f"input topics differ in partition count: {counts}")
        partition = Partitions(list(producer.partitions_for(topics.steps)))
        cpu0 = {w: group_cpu_s(p.pid) for w, p in procs.items()}
        own0 = {w: cpu_s(p.pid) for w, p in procs.items() if w.startswith("detect")}
        broker0 = sum(cpu_s(pid) for pid in broker_pids)
        records = 0
        me0 = time.process_time()
        t0 = time.time()
        bar = Progress(steps, f"{ranks} ranks", unit="steps")
        for s in range(steps):
            target = t0 + s
            now = time.time()
            if now < target:
                time.sleep(target - now)
            behind = max(behind, time.time() - target)
            gc = 300.0 if s >= 15 and s % 10 == 5 else 0.0
            for kind, key, value in job.step(s, gc, packed):
                producer.send(topic_of[kind], key=key, value=value, partition=partition(key))
                records += 1
            producer.flush()
            sent_at[s] = time.time()
            bar.update(1)
        bar.close()
        end_doc = {**start_doc, "phase": "end", "last_step": steps - 1, "ts_ns": T0_NS + steps * 10**9}
        producer.send(topics.jobs, key=job.job.encode(), value=orjson.dumps(end_doc))
        producer.flush()
        producer_cpu = time.process_time() - me0
        caught = wait_group_caught_up(settings, f"{name}-detect-decode",
                                [topics.steps, topics.kernel_summaries, topics.device, topics.jobs], 120) \
            and wait_group_caught_up(settings, f"{name}-detect", [internal.partials], 120)
        wall = time.time() - t0
        landed_caught = wait_group_caught_up(settings, f"{name}-land", [topics.steps, topics.jobs], 120)
        time.sleep(2.0)
        cpu_each = {w: group_cpu_s(p.pid) - cpu0[w] for w, p in procs.items()}
        # the detect workers' own process (the engine: Faust, the per-job agent, snapshots) apart from the
        # rest of their group (the decode process)
        engine_cpu = sum(cpu_s(procs[w].pid) - c for w, c in own0.items())
        cpu = {role: sum(c for w, c in cpu_each.items() if w.rstrip("0123456789") == role)
               for role in ("detect", "land")}
        broker_cpu = sum(cpu_s(pid) for pid in broker_pids) - broker0 if broker_pids else None
        assigned = {group: group_assignment(settings, group) for group in (
            f"{name}-detect-decode", f"{name}-detect", f"{name}-land")} if workers > 1 else {}
    finally:
        for p in procs.values():
            stop_worker(p)
        stop.set()
        listener.join(10)
        producer.close()
    events = 3 * job.world * steps
    engine = SnapshotStore(settings, internal.state).load_all().get(job.job)
    evaluated = engine.stats.frames if engine else 0
    incomplete = engine.frames.stats.incomplete if engine else steps
    backend = open_backend(settings)
    try:
        rows = int(backend.query(f"SELECT count() FROM {backend.database}.steps FINAL WHERE job = '{job.job}'")[0][0])
    finally:
        backend.close()
    lost_steps = job.world * steps - rows
    lost = max(0, lost_steps) + job.world * (steps - evaluated + incomplete)
    injected = [s for s in range(steps) if s >= 15 and s % 10 == 5]
    latencies = [seen[s] - sent_at[s] for s in injected if s in seen]
    missed = [s for s in injected if s not in seen]
    per_partition = partition_events(job.step(0, 0.0, packed), topic_of, partition, steps)
    reads = [ceiling(settings, [topics.steps, topics.kernel_summaries, topics.device], events)
             for _ in range(CEILING_READS)]
    reader = median_read(reads)
    ceil = reader["events_per_s"]
    expire_topics(settings, topics)  # a 10,240-rank trial writes ~1 GB; the measurement is done
    p99 = float(np.percentile(latencies, 99)) if latencies else float("inf")
    # land: every message landed (the job start and end too)
    stage_us = {"detect": cpu["detect"] / events * 1e6, "land": cpu["land"] / (events + 2) * 1e6}
    result: dict[str, Any] = {
        "ranks": job.world, "steps": steps, "packed": packed, "events": events, "records": records,
        "events_per_s": round(events / max(wall, 1e-9), 1),
        "producer_behind_s": round(behind, 3), "caught_up": caught and landed_caught, "lost": lost,
        "rows_landed": rows, "frames_evaluated": evaluated, "frames_incomplete": incomplete,
        "p99_latency_s": round(p99, 3), "p50_latency_s": round(float(np.median(latencies)), 3) if latencies else None,
        "missed_detections": missed,
        "cpu_us_per_event": {"producer": round(producer_cpu / events * 1e6, 2),
                             **{stage: round(us, 2) for stage, us in stage_us.items()},
                             # every broker process (JVM, TLS; replication on a cluster) over the same window,
                             # lag queries included
                             **({"broker": round(broker_cpu / events * 1e6, 2)} if broker_cpu is not None else {})},
        "ceiling_events_per_s": round(ceil, 1),
        "ceiling_us_per_event": round(1e6 / ceil, 3) if ceil > 0 else None,
        "ceiling_startup_s": round(reader["startup_s"], 3),
        "ceiling_cpu_us_per_event": round(reader["cpu_us_per_event"], 3),
        "ceiling_reads_us_per_event": [round(1e6 / r["events_per_s"], 3) if r["events_per_s"] > 0 else None
                                       for r in reads],
        "stage_ratio_to_ceiling": stage_ratios(ceil, stage_us),  # same trial: the machine's speed cancels
        "detect_us_per_event": {"engine": round(engine_cpu / events * 1e6, 2),
                                "decode": round((cpu["detect"] - engine_cpu) / events * 1e6, 2)},
        "engine_ms_per_step": round(engine_cpu / steps * 1e3, 1),
    }
    result["passed"] = bool(caught and landed_caught and lost == 0 and not missed and p99 <= 5.0 and behind < 1.0)
    result["workers"] = workers
    result["landing"] = "server" if server_url else "embedded"
    if workers > 1:
        result["cpu_us_per_event_by_worker"] = {w: round(c / events * 1e6, 2) for w, c in cpu_each.items()}
        result["shares"] = {group.removeprefix(f"{name}-"): worker_shares(members, per_partition)
                            for group, members in assigned.items()}
    return result


def unpacked_summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The unpacked (one record per event) figures, beside the packed ones; empty when none ran."""
    if not trials:
        return {}
    best = max((t for t in trials if t["passed"]), key=lambda t: t["ranks"], default=None)
    ref = best or trials[-1]
    return {"max_ranks_unpacked": best["ranks"] if best else 0,
            "cpu_us_per_event_unpacked": ref["cpu_us_per_event"], "trials_unpacked": trials}


@dataclass(frozen=True)
class Stack:
    """What a scale-out run goes through: Kafka's settings, the ClickHouse node(s) the land workers
    enter by, the broker processes whose CPU is counted, and a description for the result."""

    settings: Settings
    server_url: str
    land_urls: tuple[str, ...]
    broker_pids: Callable[[], list[int]]
    topology: dict[str, Any]


def single_stack(base: Settings, cfg: InfraConfig, broker: KafkaBroker) -> Stack:
    """One broker (replication factor 1) and one ClickHouse server."""
    server = ClickHouseServer(cfg)
    server.install()
    server.start()
    return Stack(base, server.url, (server.url,), lambda: [pid] if (pid := broker.pid()) else [],
                 {"brokers": 1, "replication_factor": 1, "min_insync_replicas": 1, "clickhouse": "one server"})


def cluster_stack(base: Settings, cluster: Cluster) -> Stack:
    """`python -m infra.launcher up --cluster`: 3 brokers (topics RF 3, min ISR 2) and 2 shards x 2 replicas; land
    worker i enters through shard ((i - 1) mod 2) + 1's first replica and inserts through the Distributed
    tables, as in `make chaos-cluster`."""
    settings = replace(cluster.client_settings(), home=base.home, secrets_dir=base.secrets_path,
                       topic_partitions=base.topic_partitions)
    entries = tuple(cluster.clickhouse.node(shard, 1).url for shard in (1, 2))
    return Stack(settings, entries[0], entries,
                 lambda: [pid for node in cluster.kafka.nodes if (pid := node.pid())],
                 {"brokers": len(cluster.kafka.nodes), "replication_factor": settings.topic_replication_factor,
                  "min_insync_replicas": settings.topic_min_insync_replicas,
                  "clickhouse": f"cluster {settings.clickhouse_cluster}: 2 shards x 2 replicas"})


def scaleout(stack: Stack, counts: list[int], sizes: list[int], steps: int, out: Path, started: str) -> None:
    """The same sizes through 1, 2, ... workers of each role (4 partitions), all landing in the same
    ClickHouse (one server or the cluster) so only the number of workers differs; stops a
    configuration at its first failing size."""
    base = stack.settings
    trials: list[dict[str, Any]] = []
    for workers in counts:
        for ranks in sizes:
            print(f"• {workers} worker(s) per role, {ranks} ranks x {steps} steps at 1 step/s ...", flush=True)
            res = trial(base, ranks, steps, True, stack.broker_pids(), workers=workers, server_url=stack.server_url,
                        land_urls=stack.land_urls)
            res["load_average"] = list(os.getloadavg())
            trials.append(res)
            print(f"  events/s {res['events_per_s']}, p99 {res['p99_latency_s']} s, lost {res['lost']}, "
                  f"cpu-us/event {res['cpu_us_per_event']}, shares {json.dumps(res.get('shares'))}, "
                  f"passed {res['passed']}", flush=True)
            if not res["passed"]:
                break
    doc = {"workers": counts, "topic_partitions": base.topic_partitions, "landing": "server",
           "topology": stack.topology,
           **scaleout_summary(trials), "steps_per_trial": steps, "trials": trials,
           "load_average_at_end": list(os.getloadavg()), "machine": machine(), "started": started,
           "git": git_commit()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print("\n| workers per role | ranks | events/s | p99 s | lost | us/event producer, detect, land, broker "
          "| ceiling us/event | passed |\n|---|---|---|---|---|---|---|---|")
    for t in trials:
        us = t["cpu_us_per_event"]
        print(f"| {t['workers']} | {t['ranks']} | {t['events_per_s']} | {t['p99_latency_s']} | {t['lost']} | "
              f"{us['producer']}, {us['detect']}, {us['land']}, {us.get('broker')} | {t['ceiling_us_per_event']} | "
              f"{t['passed']} |")
    print(f"max_ranks {doc['max_ranks']} -> {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.throughput")
    parser.add_argument("--ranks", default="256,512,1024,2048,3072,4096,6144,8192,10240",
                        help="job sizes to try, ascending (stops at the first that fails)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--unpacked-ranks", default="",
                        help="also try these sizes with one record per event (contract 1.1 form), ascending")
    parser.add_argument("--find-max", type=int, default=0, metavar="START",
                        help="instead of --ranks: grow the size x1.25 from START until one fails")
    parser.add_argument("--find-max-limit", type=int, default=None, metavar="RANKS",
                        help="with --find-max: try no size above this (the result says capped)")
    parser.add_argument("--workers", default="", metavar="N,M",
                        help="scale-out mode: the --ranks sizes through N, then M workers of each role, every "
                             "configuration landing in infra/'s ClickHouse server (-> throughput-scaleout.json)")
    parser.add_argument("--cluster", action="store_true",
                        help="with --workers: through `python -m infra.launcher up --cluster` (3 brokers, RF 3, "
                             "ClickHouse 2 shards x 2 replicas; -> throughput-scaleout-cluster.json)")
    parser.add_argument("--keep", action="store_true", help="with --cluster: leave the cluster running at the end")
    parser.add_argument("--fresh", action="store_true",
                        help="with --cluster: stop and wipe the loopback cluster first (`python -m infra.launcher wipe "
                             "--cluster`), so the brokers carry only this run's topics")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the JSON goes (default throughput.json, throughput-scaleout.json with --workers)")
    args = parser.parse_args(argv)
    if args.cluster and not args.workers:
        parser.error("--cluster needs --workers")
    started = datetime.now(UTC).isoformat()
    base = load_settings()
    base = replace(base, topic_partitions=4)
    cfg = InfraConfig.from_env()
    counts = [int(w) for w in args.workers.split(",") if w]
    sizes = [int(r) for r in args.ranks.split(",") if r]
    if args.cluster:
        cluster = Cluster(cfg)
        if args.fresh:
            cluster.stop()
            cluster.wipe()
        started_cluster = any(cluster.start().values())
        try:
            scaleout(cluster_stack(base, cluster), counts, sizes, args.steps, args.out or RESULTS_SCALEOUT_CLUSTER,
                     started)
        finally:
            if started_cluster and not args.keep:
                cluster.stop()
        return
    broker = KafkaBroker(cfg)
    broker.install()
    broker.start()
    base = replace(base, kafka_bootstrap=broker.bootstrap)
    if args.workers:
        scaleout(single_stack(base, cfg, broker), counts, sizes, args.steps, args.out or RESULTS_SCALEOUT, started)
        return
    args.out = args.out or RESULTS
    trials: list[dict[str, Any]] = []

    def run(ranks: int, packed: bool) -> dict[str, Any]:
        form = "packed" if packed else "unpacked"
        print(f"• {ranks} ranks x {args.steps} steps at 1 step/s, {form} ...", flush=True)
        res = trial(base, ranks, args.steps, packed, [pid] if (pid := broker.pid()) else [])
        res["load_average"] = list(os.getloadavg())
        trials.append(res)
        print(f"  events/s {res['events_per_s']} ({res['records']} records), p99 {res['p99_latency_s']} s, "
              f"lost {res['lost']}, cpu-us/event {res['cpu_us_per_event']}, "
              f"ceiling {res['ceiling_events_per_s']}/s, stage/ceiling {res['stage_ratio_to_ceiling']}, "
              f"passed {res['passed']}", flush=True)
        return res

    search: dict[str, Any] | None = None
    if args.find_max:
        search = find_max(lambda ranks: bool(run(ranks, True)["passed"]), args.find_max, limit=args.find_max_limit)
    else:
        for ranks in [int(r) for r in args.ranks.split(",") if r]:
            if not run(ranks, True)["passed"]:
                break
    for ranks in [int(r) for r in args.unpacked_ranks.split(",") if r]:
        if not run(ranks, False)["passed"]:
            break
    trials_unpacked = [t for t in trials if not t["packed"]]
    trials = [t for t in trials if t["packed"]]
    best = max((t for t in trials if t["passed"]), key=lambda t: t["ranks"], default=None)
    ref = best or trials[-1]
    # what 10,240 ranks (3 events per rank per second) would need, in cores, at the measured costs
    target_rate = 3 * 10_240
    cores = {stage: round(us * target_rate / 1e6, 2) for stage, us in ref["cpu_us_per_event"].items()}
    at_10240 = next((t for t in trials if t["ranks"] == target_rate // 3 and t["passed"]), None)
    out = {
        "max_ranks": best["ranks"] if best else 0,
        "events_per_s": ref["events_per_s"], "cpu_us_per_event": ref["cpu_us_per_event"],
        "p99_latency_s": ref["p99_latency_s"], "lost": ref["lost"],
        "ceiling_events_per_s": ref["ceiling_events_per_s"], "ceiling_us_per_event": ref["ceiling_us_per_event"],
        "ratio_to_ceiling": round(ref["events_per_s"] / ref["ceiling_events_per_s"], 4)
        if ref["ceiling_events_per_s"] else None,
        "stage_ratio_to_ceiling": ref["stage_ratio_to_ceiling"], "ratio_ranks": ref["ranks"],
        # the detect worker's CPU split (decode process, engine process) at ratio_ranks, and the engine's CPU
        # per step of a 10,240-rank job (issue #25 item 3)
        "detect_us_per_event": ref.get("detect_us_per_event"),
        "engine_ms_per_step_10240_ranks": at_10240.get("engine_ms_per_step") if at_10240 else None,
        **({"find_max": {**search, "tried": [
            {**step, "p99_latency_s": t["p99_latency_s"], "lost": t["lost"], "events_per_s": t["events_per_s"],
             "stage_ratio_to_ceiling": t["stage_ratio_to_ceiling"]}
            for step, t in zip(search["tried"], trials, strict=True)]}} if search else {}),
        "kafka_c_crc32c": kafka_has_c_crc32c(), "steps_per_trial": args.steps, "packed": True, "trials": trials,
        "cores_needed_10240_ranks": {**cores, "total_without_broker": round(sum(v for k, v in cores.items()
                                                                               if k != "broker"), 2),
                                     "total": round(sum(cores.values()), 2)},
        "load_average_at_end": list(os.getloadavg()),
        **unpacked_summary(trials_unpacked),
        "machine": machine(), "started": started, "git": git_commit(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("\n| form | ranks | events/s | records | p99 s | lost | us/event producer, detect, land "
          "| ceiling us/event | detect, land / ceiling | passed |\n|---|---|---|---|---|---|---|---|---|---|")
    for t in trials + trials_unpacked:
        us, ratio = t["cpu_us_per_event"], t["stage_ratio_to_ceiling"]
        print(f"| {'packed' if t['packed'] else 'unpacked'} | {t['ranks']} | {t['events_per_s']} | {t['records']} | "
              f"{t['p99_latency_s']} | {t['lost']} | {us['producer']}, {us['detect']}, {us['land']} | "
              f"{t['ceiling_us_per_event']} | {ratio['detect']}, {ratio['land']} | {t['passed']} |")
    print(f"max_ranks {out['max_ranks']} -> {args.out}")


if __name__ == "__main__":
    main()
