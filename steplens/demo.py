"""`make demo`: a simulated cluster with injected faults through the real pipeline.

Starts Kafka (and the ClickHouse server when asked), the detect and land workers, then runs a
64-rank DP8×TP4×PP2 job with one straggling rank and a few slow steps, plus a handful of
malformed events. It listens on the alerts topic like any downstream consumer, waits
until both workers have caught up (consumer lag 0), stops them, reads the landed history
back with SQL and prints what was found next to the ground truth. Exits non-zero if an
injected fault was missed, so a broken pipeline cannot pass for a working one.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.clients import kafka_client_config
from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.simulator.catalogue import data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.stream import SimRun, stream_runs
from producers.simulator.topology import Topology
from schemas import ContractError, Incident, Topics, decode_as, encode, rank_key
from sinks import Backend, open_backend
from sinks.backend import qualified
from steplens.lag import end_offsets, wait_pipeline_caught_up
from steplens.report import plain, render_markdown
from steplens.scoring import score, steps_in_ranges
from streams.land.processor import landing_types
from streams.topics_admin import DetectTopics, ensure_topics

CATCH_UP_TIMEOUT_S = 240.0


@dataclass(slots=True)
class DemoRun:
    job: str
    truth: GroundTruth
    alerts: list[Incident] = field(default_factory=list)
    bad_events_sent: int = 0
    timings: dict[str, float] = field(default_factory=dict)


def build_job(job_id: str, steps: int, seed: int, *, now_ns: int | None = None) -> FleetJob:
    """The demo job, as catalogue faults on the fleet simulator (its realistic healthy noise: warm-up,
    checkpoints, evaluation, hiccups, GC): a straggler on rank 37 throughout (compute ×1.25), three
    steps of 350 ms GC pauses on every rank and three of a 450 ms data stall.

    The data stall lasts three steps: one slow batch on its own is part of healthy training
    (the slow step opens only when it persists: `slow_step_open_after`, docs/detection.md), and
    a demo that injected a single one failed its own check (tests/steplens/test_demo_job.py
    now replays this job through the engine).

    The job runs on today's clock: it ends just before `now_ns` (default: now), so `steplens ranks
    --since 10m` right after the demo, the report's axes and the timeline all show it where a
    user looks (its length is estimated from the healthy step time, with room for the faults)."""
    topo = Topology(dp=8, tp=4, pp=2)
    gc, stall = (40, 41, 42), (77, 78, 79)  # a shorter demo (`--steps 30`) injects only what fits in it
    faults = [straggler(topo, 37, 1.25, 0, steps - 1), *(gc_pauses(topo, gc, 350.0) if steps > gc[-1] else []),
              *(data_stalls(topo, stall, 450.0) if steps > stall[-1] else [])]
    nominal_ms = FleetJob(job_id, topo, 1, (), seed).nominal_ms
    end_ns = time.time_ns() if now_ns is None else now_ns
    start_ns = end_ns - int(steps * nominal_ms * 1.5 * 1e6)
    return FleetJob(job_id, topo, steps, faults, seed, start_ns=start_ns)


def malformed_events(job: str) -> list[tuple[bytes, bytes]]:
    """Out-of-contract inputs a real fleet produces: garbage, a newer major, a bad field."""
    good = {"type": "step", "v": "1.0", "job": job, "rank": 0, "world": 64, "host": "node-0", "device": 0,
            "step": 0, "start_ns": 1, "end_ns": 2}
    return [
        (b"junk", b"\x00not json at all"),
        (rank_key(job, 0), orjson.dumps({**good, "v": "2.0"})),
        (rank_key(job, 0), orjson.dumps({**good, "end_ns": 0})),
    ]


def worker_env(settings: Settings) -> dict[str, str]:
    """A worker process's environment for `settings`: its home, Kafka (and its clients' timeouts) and
    topics (replication too), ClickHouse (server, database, cluster, or the embedded path) and
    secrets; no config file."""
    s = settings
    env = {**os.environ, "STEPLENS_HOME": str(s.home), "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": s.topic_prefix, "STEPLENS_APP_ID": s.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(s.topic_partitions),
           "STEPLENS_CLICKHOUSE_DATABASE": s.clickhouse_database, "STEPLENS_CLICKHOUSE_URL": s.clickhouse_url,
           "STEPLENS_CHDB_PATH": str(s.embedded_path), "STEPLENS_SECRETS_DIR": str(s.secrets_path),
           "STEPLENS_TOPIC_REPLICATION_FACTOR": str(s.topic_replication_factor),
           "STEPLENS_TOPIC_MIN_INSYNC_REPLICAS": str(s.topic_min_insync_replicas),
           "STEPLENS_CLICKHOUSE_CLUSTER": s.clickhouse_cluster,
           "STEPLENS_KAFKA_REQUEST_TIMEOUT_S": str(s.kafka_request_timeout_s),
           "STEPLENS_KAFKA_RECONNECT_BACKOFF_MAX_S": str(s.kafka_reconnect_backoff_max_s)}
    env.pop("STEPLENS_CONFIG", None)
    return env


def start_worker(role: str, env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    log = open(logs / f"worker-{role}.log", "ab")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "streams", "worker", "--role", role],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def wait_caught_up(settings: Settings, workers: list[subprocess.Popen[bytes]], on_poll: Any) -> None:
    """Poll consumer lag until every worker has committed everything (twice in a row)."""
    topics = Topics(settings.topic_prefix)
    groups = {
        f"{settings.app_id}-detect-decode": [topics.steps, topics.kernel_summaries, topics.device, topics.jobs],
        f"{settings.app_id}-detect": [DetectTopics(settings.topic_prefix).partials],
        f"{settings.app_id}-land": list(landing_types(topics)),
    }
    wait_pipeline_caught_up(settings, groups, workers, timeout_s=CATCH_UP_TIMEOUT_S, on_poll=on_poll)


def query_results(settings: Settings, job: str, since_ns: int) -> dict[str, Any]:
    backend = open_backend(settings, "read")
    try:
        return results_from(backend, job, since_ns, Topics(settings.topic_prefix).steps)
    finally:
        backend.close()


def write_html_report(settings: Settings, job: str, path: Path) -> Path:
    """The job's capacity report (the same page as `steplens report --job J`), next to report.md: a newcomer
    opens it in a browser right after the demo."""
    from steplens.queries.base import TimeRange
    from steplens.queries.report import collect
    from steplens.report_html import write

    backend = open_backend(settings, "read")
    try:
        data = collect(backend, job, TimeRange(), progress=None)
    finally:
        backend.close()
    return write(data, path)


def results_from(backend: Backend, job: str, since_ns: int, bad_events_topic: str) -> dict[str, Any]:
    """What the report shows about `job`, read back with SQL; values are query parameters, never SQL.

    `dead_letters` counts the dead letters of `bad_events_topic` (where the demo sends its
    malformed events) since `since_ns`.
    """
    steps_t = qualified(backend.database, "steps")
    incidents_t = qualified(backend.database, "incidents")
    dead_t = qualified(backend.database, "dead_letters")
    params = {"job": job, "since_ns": since_ns, "topic": bad_events_topic}
    steps = backend.query(
        f"SELECT count(), uniqExact(rank), max(step) FROM {steps_t} FINAL WHERE job = %(job)s", params
    )
    incidents = backend.query(
        f"SELECT incident_id, rule, state, severity, scope, ranks, step_first, step_last, summary, cause, suggestion "
        f"FROM {incidents_t} FINAL WHERE job = %(job)s ORDER BY rule, step_first", params
    )
    slowest = backend.query(
        f"SELECT rank, round(avg(duration_ms - ifNull(comm_exposed_ms, 0)), 1) AS busy "
        f"FROM {steps_t} FINAL WHERE job = %(job)s GROUP BY rank ORDER BY busy DESC LIMIT 3", params
    )
    dead = backend.query(
        f"SELECT count() FROM {dead_t} WHERE received_ns >= %(since_ns)s AND topic = %(topic)s", params
    )
    attempts = backend.query(  # contract 1.4: each launch of the job (a relaunch re-runs steps under the same id)
        f"SELECT attempt, count(), uniqExact(rank), min(step), max(step) FROM {steps_t} FINAL "
        f"WHERE job = %(job)s GROUP BY attempt ORDER BY attempt", params
    )
    return {
        "steps_rows": steps[0][0], "ranks": steps[0][1], "last_step": steps[0][2],
        "incidents": [
            dict(zip(("incident_id", "rule", "state", "severity", "scope", "ranks", "step_first", "step_last",
                      "summary", "cause", "suggestion"), row, strict=True))
            for row in incidents
        ],
        "slowest_ranks_sql": [{"rank": r, "busy_ms": b} for r, b in slowest],
        "dead_letters": dead[0][0],
        "attempts": [dict(zip(("attempt", "steps_rows", "ranks", "first_step", "last_step"), (int(v) for v in row),
                              strict=True)) for row in attempts],
    }


def start_alertmanager(infra_cfg: InfraConfig, where: str) -> str:
    """The Alertmanager the demo's incidents go to: `local` starts infra's on loopback (apt-installed when
    missing); anything else is a URL."""
    if where != "local":
        return where.rstrip("/")
    from infra.launcher.alertmanager import AlertmanagerServer

    server = AlertmanagerServer(infra_cfg)
    server.install()
    server.start()
    return server.url


@dataclass(slots=True)
class DemoBridge:
    """The Alertmanager bridge beside the demo (what `steplens alerts forward` runs): live while the job
    streams, then once more until every incident's last state (resolved) is posted."""

    settings: Settings
    url: str
    posted: int = 0
    _bridge: Any = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        from streams.alerts.bridge import AlertBridge

        self._bridge = AlertBridge(self.settings, self.url)
        self._thread = threading.Thread(target=self._bridge.run, name="demo-alerts", daemon=True)
        self._thread.start()

    def finish(self) -> int:
        from streams.alerts.bridge import AlertBridge

        if self._bridge is not None and self._thread is not None:
            self._bridge.stop()
            self._thread.join(60)
            self.posted += self._bridge.stats.posted
        self.posted += AlertBridge(self.settings, self.url, once=True).run().posted
        return self.posted


def run(settings: Settings, steps: int, seed: int, use_server: bool, *, paced: bool = False,
        alertmanager: str = "", job_id: str = "", reports_root: Path = REPO_ROOT / "reports") -> int:
    t_start = time.monotonic()
    t_start_ns = time.time_ns()
    infra_cfg = InfraConfig.from_env()
    broker = KafkaBroker(infra_cfg)
    print(f"• Kafka 3.9.1 (KRaft) on {broker.bootstrap} …", flush=True)
    broker.install()
    broker.start()
    if use_server:
        server = ClickHouseServer(infra_cfg)
        server.install()
        server.start()
        settings = replace(settings, clickhouse_url=server.url)
        print(f"• ClickHouse server {server.version()} at {server.url}", flush=True)
    else:
        print(f"• embedded ClickHouse (chdb) at {settings.embedded_path}", flush=True)
    settings = replace(settings, kafka_bootstrap=broker.bootstrap)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)

    job_id = job_id or time.strftime("demo-%Y%m%d-%H%M%S")
    out_dir = reports_root / job_id
    out_dir.mkdir(parents=True, exist_ok=True)
    sim = build_job(job_id, steps, seed)
    run_state = DemoRun(job=job_id, truth=sim.ground_truth())
    run_state.truth.write(out_dir / "ground_truth.jsonl")

    alert_start = end_offsets(settings, topics.incidents)
    env = worker_env(settings)
    logs = infra_cfg.logs_dir
    logs.mkdir(parents=True, exist_ok=True)
    workers = [start_worker(role, env, logs) for role in ("detect", "land")]
    print(f"• workers: detect pid {workers[0].pid}, land pid {workers[1].pid} (logs in {logs})", flush=True)
    bridge = DemoBridge(settings, start_alertmanager(infra_cfg, alertmanager)) if alertmanager else None
    if bridge is not None:
        bridge.start()
        print(f"• its incidents go to Alertmanager at {bridge.url}: firing while they last, then resolved", flush=True)

    alerts = KafkaConsumer(**kafka_client_config(settings, "reader"), enable_auto_commit=False)
    parts = [TopicPartition(topics.incidents, p) for p in alert_start]
    alerts.assign(parts)
    for tp in parts:
        alerts.seek(tp, alert_start[tp.partition])

    def drain_alerts() -> None:
        batches = alerts.poll(timeout_ms=0)
        for msg in (m for records in batches.values() for m in records):
            try:
                incident = decode_as(Incident, msg.value)
            except ContractError:
                continue
            if incident.job == job_id:
                run_state.alerts.append(incident)
                print(f"  ALERT {incident.state:<8} {incident.rule:<9} {plain(incident.summary)}", flush=True)

    try:
        topo = sim.topology
        print(f"• simulating job {job_id}: {topo.world} ranks (DP{topo.dp}×TP{topo.tp}×PP{topo.pp}), "
              f"{steps} steps, {len(sim.faults)} injected faults", flush=True)
        t_sim = time.monotonic()
        # what a fleet sends: each rank's steps and kernel summaries, each node sampler's device samples
        sim_run = SimRun(sim)
        producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all", linger_ms=5,
                                 batch_size=1 << 20, max_request_size=2 << 20)
        try:
            stream_runs([sim_run], topics, lambda t, k, v: producer.send(t, key=k, value=v), paced=paced,
                        on_step=drain_alerts)
            producer.flush(timeout=120)
        finally:
            producer.close()
        run_state.timings["simulate_and_send_s"] = time.monotonic() - t_sim
        print(f"• sent {sim_run.events} events (steps, kernel summaries, device samples) in "
              f"{run_state.timings['simulate_and_send_s']:.1f}s{' at the job pace' if paced else ''}", flush=True)

        producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks="all")
        for key, value in malformed_events(job_id):
            producer.send(topics.steps, key=key, value=value)
            run_state.bad_events_sent += 1
        producer.flush()
        producer.close()
        print(f"• sent {run_state.bad_events_sent} malformed events (expect them in the dead-letter topic)", flush=True)

        t_wait = time.monotonic()
        wait_caught_up(settings, workers, drain_alerts)
        drain_alerts()
        run_state.timings["catch_up_s"] = time.monotonic() - t_wait
        if bridge is not None:
            posted = bridge.finish()
            query = urllib.parse.quote(f'{{training_job="{job_id}"}}')
            print(f"• {posted} alert updates posted to Alertmanager ({bridge.url}/#/alerts?filter={query}): each "
                  "incident fired while it lasted and is resolved now (its receivers were told)", flush=True)
    finally:
        alerts.close()
        for proc in workers:
            stop_worker(proc)

    results = query_results(settings, job_id, t_start_ns)
    truth = run_state.truth
    # the straggler's incident, whatever rule opened it: SLOW_RANK from the steps, or R4/R5 when its kernel
    # summaries show the slow compute first (every rank-scope incident counts: a wrong rank costs precision)
    found_ranks = {r for i in results["incidents"] if i["scope"] in ("rank", "device") for r in i["ranks"]}
    found_steps = steps_in_ranges([
        (i["step_first"], i["step_last"]) for i in results["incidents"] if i["rule"] == "SLOW_STEP"
    ])
    rank_score = score(truth.slow_ranks(), found_ranks)
    step_score = score(truth.slow_steps(), found_steps)
    run_state.timings["total_s"] = time.monotonic() - t_start
    report = {
        "job": job_id, "backend": "server " + settings.clickhouse_url if settings.uses_server else "embedded chdb",
        "world": sim.topology.world, "steps": steps, "seed": seed,
        "ground_truth": truth.to_dict(), "results": results,
        "alerts_received": [encode(a).decode() for a in run_state.alerts],
        "bad_events_sent": run_state.bad_events_sent,
        "scores": {
            "slow_rank": {"truth": sorted(rank_score.truth), "found": sorted(rank_score.found),
                          "precision": rank_score.precision, "recall": rank_score.recall},
            "slow_step": {"truth": sorted(step_score.truth), "found": sorted(step_score.found),
                          "precision": step_score.precision, "recall": step_score.recall},
        },
        "timings_s": run_state.timings,
    }
    (out_dir / "report.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    markdown = render_markdown(report)
    (out_dir / "report.md").write_text(markdown)
    print()
    print(markdown)
    html = write_html_report(settings, job_id, out_dir / "report.html")
    print(f"report: {out_dir / 'report.md'}; capacity report (open in a browser): {html}")
    ok = (
        rank_score.recall == 1.0
        and step_score.recall == 1.0
        and results["steps_rows"] == sim.topology.world * steps
        and results["dead_letters"] == run_state.bad_events_sent
    )
    if not ok:
        print("DEMO FAILED: an injected fault was missed, or not every step or dead letter landed", file=sys.stderr)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="steplens demo", description="a simulated 64-rank job with injected faults "
                                     "through Kafka, the workers and ClickHouse, scored against its ground truth")
    parser.add_argument("--steps", type=int, default=120, help="training steps to simulate (default 120)")
    parser.add_argument("--seed", type=int, default=7, help="the simulator's seed (default 7)")
    parser.add_argument("--clickhouse", choices=("embedded", "server"), default="embedded",
                        help="land in embedded chdb (default) or the ClickHouse server started by infra/")
    parser.add_argument("--paced", action="store_true",
                        help="send each step when the simulated job would end it (~1 min for 120 steps), so "
                        "incidents open and resolve while you watch")
    parser.add_argument("--alertmanager", metavar="URL|local", default="",
                        help="post the incidents to this Alertmanager as the bridge does (`local`: start one "
                        "on loopback, infra/)")
    args = parser.parse_args(argv)
    return run(load_settings(), args.steps, args.seed, use_server=args.clickhouse == "server", paced=args.paced,
               alertmanager=args.alertmanager)
