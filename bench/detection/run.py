"""`make bench-detection`: every scenario of the fault catalogue through real Kafka and the workers.

Starts Kafka and the two workers (`python -m streams worker --role detect|land`, like the
demo), streams every run as a separate job, all interleaved in one pipeline run (as fast as
possible), then a paced subset for delay in seconds; waits until the workers caught up,
reads the incidents from the alerts topic (every state) and ClickHouse (latest state per
incident, a cross-check), scores them against the ground truth and writes
bench/results/detection.json plus a table. `--quick`: a few scenarios, one seed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from bench.detection.repeat import merge_repeats
from bench.provenance import git_commit, machine
from infra.clients import kafka_client_config
from infra.launcher import InfraConfig, KafkaBroker
from infra.progress import Progress
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.simulator.attempts import plan_attempts
from producers.simulator.catalogue import SCENARIOS, build_faults
from producers.simulator.fleet import FleetJob
from producers.simulator.ground_truth import write_ground_truth
from producers.simulator.model import ModelConfig
from producers.simulator.stream import SimRun, stream_runs
from producers.simulator.topology import Topology
from producers.simulator.traits import Traits
from schemas import Topics
from sinks import open_backend
from steplens.demo import start_worker, stop_worker
from steplens.lag import end_offsets, wait_pipeline_caught_up
from steplens.scoring import (
    RunScore,
    RunTruth,
    false_alarms_per_100k,
    false_alarms_per_job_day,
    latest_incidents,
    score_run,
    summarise,
)
from streams.detect.state.store import SnapshotStore
from streams.topics_admin import DetectTopics, ensure_topics, expire_topics

QUICK = ("slow_rank", "slow_host", "gc_leak", "link_degradation", "hung_rank", "step_time_shift",
         "hermes_gc_moe", "cooling_loss")
LARGE_FAMILY = "slow_host"
PACED = {"slow_rank": 3, "slow_host": 1}  # scenario -> seeds streamed in real time together (delay in seconds)
PACED_STEP_S = 1.0  # the paced runs' healthy step time (issue #6: delay targets at 1 step/s)
# the fleet-wide drift phases (scenario fleet_drift): each a fleet of its own, after the others ended (a drift is
# most running jobs of a link class or device kind below together); (dp, tp, pp) per job, and a healthy job beside
DRIFT = "fleet_drift"
DRIFT_LAYOUTS = ((8, 4, 2), (8, 8, 1), (8, 4, 4), (4, 4, 2))
DRIFT_HEALTHY_LAYOUT = (8, 4, 2)
# the scenario whose job-long condition every drifting job of a phase has: a fabric rollout (RoCE at 40 %), then a
# power-policy rollout (every device at 0.8x its clock)
DRIFT_PHASES = (DRIFT, "compute_downclock")
DRIFT_FLEET = "fleet@drift"  # phase n's fleet incidents are job f"{DRIFT_FLEET}-{n}" (renamed from "fleet")
DRIFT_RESOLVE_WAIT_S = 180.0  # a phase's fleet incident resolves ~100 ticks (~50 s) after its jobs ended
FLEET_ROUNDS = 1_000_000  # a fleet incident's "steps" are the fleet's drift judgements: any number is in time
FULL_LARGE_HEALTHY = 1  # 1,024-rank healthy runs in the full bench: fits 45 min on 2 cores (17 for >= 2 M rank-steps)


def plan_runs(args: argparse.Namespace, stamp: str) -> list[tuple[str, SimRun]]:
    names = [n for n in args.scenario if n != DRIFT] if args.scenario else list(QUICK) if args.quick else [
        s for s, sc in SCENARIOS.items() if sc.layer not in ("healthy", "drift")]
    seeds = range(1 if args.quick else args.seeds)
    runs: list[tuple[str, SimRun]] = []
    traits = run_traits(args)

    def add(name: str, ranks: int, seed: int, label: str) -> None:
        sc = SCENARIOS[name]
        topo = sc.topology(ranks)
        faults = build_faults(sc, topo, args.steps, seed)
        attempts = plan_attempts(f"bench-{stamp}-{label}-{topo.world}-s{seed}", topo, args.steps, faults, seed,
                                 model=sc.model(topo), noise=sc.noise(), traits=traits)
        runs.append((label, SimRun.of_attempts(attempts, packed=getattr(args, "packed", True))))

    for name in names:
        for seed in seeds:
            add(name, args.ranks, seed, name)
    add(LARGE_FAMILY, args.large_ranks, 0, f"{LARGE_FAMILY}@{args.large_ranks}")  # one seed: 1,024 ranks cost
    for seed in range(args.healthy_runs or (2 if args.quick else 3 * len(seeds))):
        add("healthy", args.ranks, seed, "healthy")
    if not args.scenario:  # quick restarts, elastic relaunches, memory full or sawing by design, periodic
        for seed in seeds:  # checkpoints and evaluation: nothing either
            for name in ("healthy_restart", "healthy_elastic", "healthy_full_memory", "healthy_memory_sawtooth",
                         "healthy_checkpoint_async", "healthy_checkpoint_eval"):
                add(name, args.ranks, 300 + seed, name)
    for seed in range(args.jittery_runs if args.jittery_runs is not None else len(seeds)):
        add("healthy_jittery", args.ranks, 200 + seed, "healthy_jittery")  # 8 % jitter: quiet, not just lucky
    # the zero-false-alarm claim needs >= 2,000,000 healthy rank-steps, >= 1,024-rank runs included
    large = args.large_healthy_runs
    if large is None:
        large = 0 if args.quick else FULL_LARGE_HEALTHY
    for seed in range(large):
        add("healthy", args.large_ranks, 100 + seed, f"healthy@{args.large_ranks}")
    return runs


def run_traits(args: argparse.Namespace) -> Traits:
    """The simulator's traits for this bench run: all on, less those named by `--trait-off`."""
    return Traits().without(getattr(args, "trait_off", None) or [])


def add_trait_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trait-off", action="append", default=[], choices=Traits.names(), metavar="TRAIT",
                   help=f"simulate without this real-cluster trait (repeatable; {', '.join(Traits.names())}): "
                        "the earlier, simpler ruler, for comparison")


def plan_paced(args: argparse.Namespace, stamp: str) -> list[tuple[str, SimRun]]:
    """The runs streamed in real time (1 step/s) for delay in seconds: several faults, one minute.

    They run side by side, so 4 runs cost the wall time of one (`--paced-steps` steps) and
    give p50/p99 over 4 delays instead of one number; `--paced-seeds` overrides the seeds per scenario.
    """
    runs: list[tuple[str, SimRun]] = []
    for name, seeds in PACED.items():
        if args.scenario and name not in args.scenario:
            continue
        sc = SCENARIOS[name]
        topo = sc.topology(args.ranks)
        model = paced_model(sc.model(topo), topo)
        for seed in range(args.paced_seeds if args.paced_seeds is not None else seeds):
            faults = build_faults(sc, topo, args.paced_steps, seed)
            attempts = plan_attempts(f"bench-{stamp}-{name}-paced-{args.ranks}-s{seed}", topo, args.paced_steps,
                                     faults, seed, model=model, traits=run_traits(args))
            runs.append((f"{name}@paced", SimRun.of_attempts(attempts, packed=getattr(args, "packed", True))))
    return runs


def plan_drift(args: argparse.Namespace, stamp: str) -> list[list[tuple[str, SimRun]]]:
    """The fleet-wide drift phases, one per DRIFT_PHASES scenario: DRIFT_LAYOUTS' jobs under its condition and one
    healthy job beside (another fabric, another power policy), streamed together once every other job (and the
    phase before) ended. None with --quick unless named."""
    if (args.scenario and DRIFT not in args.scenario) or (args.quick and not args.scenario):
        return []
    sc = SCENARIOS[DRIFT]
    phases = []
    for n, name in enumerate(DRIFT_PHASES):
        runs: list[tuple[str, SimRun]] = []
        for i, shape in enumerate((*DRIFT_LAYOUTS, DRIFT_HEALTHY_LAYOUT)):
            dp, tp, pp = shape
            topo = Topology(dp=dp, tp=tp, pp=pp, ep=1, devices_per_host=8)
            healthy = i == len(DRIFT_LAYOUTS)
            faults = [] if healthy else build_faults(SCENARIOS[name], topo, args.steps, i)
            kind = "healthy" if healthy else faults[0].kind
            job = f"bench-{stamp}-{DRIFT}-{n}-{kind}-{dp}x{tp}x{pp}"
            attempts = plan_attempts(job, topo, args.steps, faults, 400 + 10 * n + i, model=sc.model(topo),
                                     traits=run_traits(args))
            runs.append((DRIFT, SimRun.of_attempts(attempts, packed=getattr(args, "packed", True))))
        phases.append(runs)
    return phases


def wait_fleet_resolved(settings: Settings, topic: str, start: dict[int, int], timeout_s: float) -> None:
    """Until every fleet incident opened since `start` resolved (the next drift phase may not join it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states: dict[str, str] = {}
        for m in read_alerts(settings, topic, start, {"fleet"}):
            states[str(m["incident_id"])] = str(m.get("state"))
        if all(s == "resolved" for s in states.values()):
            return
        if time.monotonic() > deadline:
            print(f"• WARNING: fleet incidents still open {timeout_s:.0f} s after their phase: {sorted(states)}",
                  flush=True)
            return
        time.sleep(2.0)


def paced_model(model: ModelConfig, topo: Topology, step_s: float = PACED_STEP_S) -> ModelConfig:
    """The scenario's model with its sequence shortened (steps of 128 tokens) until a healthy step takes <= `step_s`.

    Issue #6 states the delay target at 1 step/s; the default 7B model at 64 ranks takes
    1.19 s per healthy step (1.4 s with a straggler), so delay in seconds measured on it
    carried 20 % more time per confirming step than the target assumes.
    """
    seq = model.seq
    while seq > 128 and FleetJob("paced", topo, 1, (), 0, model=replace(model, seq=seq)).nominal_ms > 1000 * step_s:
        seq -= 128
    return replace(model, seq=seq)


def wait_caught_up(settings: Settings, workers: list[subprocess.Popen[bytes]], stall_s: float) -> None:
    """Poll consumer lag until both workers committed everything (twice in a row). Fails when a
    worker exits or the lag has not shrunk for `stall_s` (a slow engine is fine, a stuck one is not)."""
    topics = Topics(settings.topic_prefix)
    groups = {
        f"{settings.app_id}-detect-decode": [topics.steps, topics.kernel_summaries, topics.device, topics.jobs],
        f"{settings.app_id}-detect": [DetectTopics(settings.topic_prefix).partials],
        f"{settings.app_id}-land": [topics.steps, topics.jobs, topics.incidents],
    }
    wait_pipeline_caught_up(settings, groups, workers, stall_s=stall_s, every_s=2.0)


def wait_jobs_finished(settings: Settings, jobs: set[str], timeout_s: float) -> set[str]:
    """After the consumer lag is 0: wait until the detect worker's snapshots show every job in
    `jobs` finished (or, a job whose last launch crashed, stopped: JOB_STOPPED raised) with an
    empty outbox; return those that did not within `timeout_s`.

    Lag 0 means every chunk was applied, not that every frame was released: a frame still
    waiting for a report (or the input judged lagging for a few seconds more) releases later,
    and stopping the workers then loses its incidents. A job's last snapshot says `finished`
    once all of its frames were evaluated and its end handled; an empty outbox, once what that
    produced was sent.
    """
    store = SnapshotStore(settings, DetectTopics(settings.topic_prefix).state)
    deadline = time.monotonic() + timeout_s
    while True:
        snaps = store.load()
        left = {j for j in jobs if not (j in snaps and (snaps[j][0].finished or snaps[j][0].stopped)
                                        and not snaps[j][1].pending)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


def read_alerts(settings: Settings, topic: str, start: dict[int, int], jobs: set[str],
                end: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The alert messages of `jobs` from offsets `start` up to `end` (default: the topic's end now)."""
    consumer = KafkaConsumer(**kafka_client_config(settings, "reader"), enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in start]
    consumer.assign(parts)
    for tp in parts:
        consumer.seek(tp, start[tp.partition])
    end = end or end_offsets(settings, topic)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(consumer.position(tp) < end[tp.partition] for tp in parts):
        for records in consumer.poll(timeout_ms=500).values():
            for msg in records:
                try:
                    data = orjson.loads(msg.value)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(data, dict) and data.get("job") in jobs and msg.offset < end[msg.partition]:
                    out.append(data)
    consumer.close()
    return out


def clickhouse_incidents(settings: Settings, jobs: set[str], fleet_ids: set[str]) -> int:
    """This run's incidents in ClickHouse: its jobs' and the fleet incidents it saw on the alerts topic
    (the fleet's book outlives a run, so its ids, not its job name, say which are this run's)."""
    backend = open_backend(settings)
    try:
        names = ", ".join(f"'{j}'" for j in sorted(jobs))
        where = f"job IN ({names})"
        if fleet_ids:
            ids = ", ".join(f"'{i}'" for i in sorted(fleet_ids))
            where += f" OR (job = 'fleet' AND incident_id IN ({ids}))"
        rows = backend.query(f"SELECT count() FROM {backend.database}.incidents FINAL WHERE {where}")
        return int(rows[0][0])
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.detection", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}; one seed")
    p.add_argument("--keep-topics", action="store_true",
                   help="keep the data of this run's Kafka topics (expired by default: a full run writes ~10 GB)")
    p.add_argument("--scenario", action="append", help="run only these scenarios (repeatable)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--large-ranks", type=int, default=1024)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--healthy-runs", type=int, default=0, help="default: 3 × seeds (2 with --quick)")
    p.add_argument("--large-healthy-runs", type=int, default=None,
                   help=f"healthy runs at --large-ranks (default {FULL_LARGE_HEALTHY}, so the full run fits 45 min "
                        "on 2 cores; 17 gives the 2.09 M healthy rank-steps of issue #6's zero-false-alarm claim, "
                        "about 45 min here; 0 with --quick)")
    p.add_argument("--jittery-runs", type=int, default=None,
                   help="healthy runs at 8 %% per-phase jitter (scenario healthy_jittery; default: one per seed)")
    p.add_argument("--paced-steps", type=int, default=60)
    p.add_argument("--paced-seeds", type=int, default=None,
                   help=f"seeds per paced scenario (default {', '.join(f'{k}: {v}' for k, v in PACED.items())})")
    p.add_argument("--no-paced", action="store_true")
    p.add_argument("--unpacked", dest="packed", action="store_false",
                   help="send one record per event instead of per-host packed records (contract 1.2, the default: "
                        "what a node agent sends; job starts declare kernel summaries, contract 1.3)")
    add_trait_option(p)
    p.add_argument("--stall-s", type=float, default=300.0, help="fail when the workers' lag stops shrinking")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "detection.json")
    p.add_argument("--rescore", type=Path, metavar="DIR", help="score a finished run's saved runs.json + alerts.jsonl")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the plan N times in a row, each on fresh topics and workers; the file keeps every run "
                        "and, per scenario, its worst figures (bench/detection/repeat.py)")
    args = p.parse_args(argv)
    if args.rescore:
        return rescore(args.rescore, args.out)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.quick:
        args.large_ranks = min(args.large_ranks, 1024)
        args.steps = min(args.steps, 60)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup (stop the workers)
    results = []
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"• run {n + 1} of {args.repeat}", flush=True)
        results.append(run_plan(args))
        if args.repeat > 1:
            print(render_table(results[-1]), flush=True)
        # after every run: a plan stopped in its third run keeps the first two
        write_result(args.out, results[0] if args.repeat == 1 else merge_repeats(results))
    return 0


def run_plan(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the plan: fresh topics, the two workers, every run streamed, then scored."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    stamp = time.strftime("%H%M%S")
    # fresh topics per bench run: no backlog or history from an earlier run reaches the workers
    settings = replace(load_settings(), topic_prefix=f"{load_settings().topic_prefix}bench{stamp}.")
    infra_cfg = InfraConfig.from_env()
    broker = KafkaBroker(infra_cfg)
    broker.install()
    broker.start()
    settings = replace(settings, kafka_bootstrap=broker.bootstrap)
    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    runs = plan_runs(args, stamp)
    paced_runs: list[tuple[str, SimRun]] = []
    if not args.no_paced:
        paced_runs = plan_paced(args, stamp)
    drift_phases = plan_drift(args, stamp)
    drift_runs = [r for phase in drift_phases for r in phase]
    gt_dir = REPO_ROOT / "reports" / f"bench-detection-{stamp}"
    for _, run in runs + paced_runs + drift_runs:
        write_ground_truth(gt_dir / f"{run.job.job_id}.jsonl", list(run.faults), run.job.job_id, run.job.seed,
                           run.job.steps)
    alert_start = end_offsets(settings, topics.incidents)
    env = {**os.environ, "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": settings.topic_prefix,
           "STEPLENS_CLICKHOUSE_URL": settings.clickhouse_url, "STEPLENS_HOME": str(settings.home)}
    if not env.get("STEPLENS_REFERENCE_MODELS"):  # a new fleet started from an export: fitted on other layouts
        from bench.detection.reference import build as build_reference

        build_reference(gt_dir / "reference.json")
        env["STEPLENS_REFERENCE_MODELS"] = str(gt_dir / "reference.json")
    logs = infra_cfg.logs_dir
    logs.mkdir(parents=True, exist_ok=True)
    workers = [start_worker(role, env, logs) for role in ("detect", "land")]
    print(f"• {len(runs)} runs as fast as possible + {len(paced_runs)} paced + {len(drift_runs)} in "
          f"{len(drift_phases)} drifting fleets; "
          f"workers {[w.pid for w in workers]}; "
          f"ground truth in {gt_dir}", flush=True)
    producer = KafkaProducer(**kafka_client_config(settings, "producer"), acks=1, linger_ms=20,
                             batch_size=512 * 1024, max_request_size=2 * 1024 * 1024)

    def send(topic: str, key: bytes, value: bytes) -> None:
        producer.send(topic, key=key, value=value)

    try:
        t_send = time.monotonic()
        with Progress(max((r.job.steps for _, r in runs), default=0), "send", unit="steps") as bar:
            stream_runs([r for _, r in runs], topics, send, on_step=bar.update)
        producer.flush()
        sent = sum(r.events for _, r in runs)
        print(f"• sent {sent} events in {time.monotonic() - t_send:.0f}s; waiting for the workers", flush=True)
        wait_caught_up(settings, workers, args.stall_s)
        print(f"• caught up after {time.monotonic() - t_send:.0f}s", flush=True)
        _wait_finished_or_warn(settings, {r.job.job_id for _, r in runs})
        if paced_runs:
            print(f"• paced: {len(paced_runs)} runs of {args.paced_steps} steps in real time", flush=True)
            stream_runs([r for _, r in paced_runs], topics, send, paced=True, on_step=producer.flush)
            producer.flush()
            wait_caught_up(settings, workers, args.stall_s)
            _wait_finished_or_warn(settings, {r.job.job_id for _, r in paced_runs})
        drift_starts = []  # the alerts topic's end offsets as each drift phase began
        for n, phase in enumerate(drift_phases):  # a fleet of its own: every earlier job ended
            drift_starts.append(end_offsets(settings, topics.incidents))
            print(f"• fleet-wide drift {n}: {len(phase)} jobs together", flush=True)
            stream_runs([r for _, r in phase], topics, send)
            producer.flush()
            wait_caught_up(settings, workers, args.stall_s)
            _wait_finished_or_warn(settings, {r.job.job_id for _, r in phase})
            wait_fleet_resolved(settings, topics.incidents, drift_starts[-1], DRIFT_RESOLVE_WAIT_S)
            wait_caught_up(settings, workers, args.stall_s)  # the land worker has the resolution too
    finally:
        producer.close()
        for proc in workers:
            stop_worker(proc)
    all_runs = runs + paced_runs + drift_runs
    jobs = {r.job.job_id for _, r in all_runs}
    messages = read_alerts(settings, topics.incidents, alert_start, jobs)
    # fleet incidents: before the drift phases they answer no fault (false alarms); in phase n, that drift's (one
    # incident per phase: the fleet's book may re-open a held one with its id, so the id gets the phase too)
    ends = [*drift_starts[1:], None]
    fleet_messages = read_alerts(settings, topics.incidents, alert_start, {"fleet"})
    messages += read_alerts(settings, topics.incidents, alert_start, {"fleet"}, drift_starts[0] if drift_starts
                            else None)
    for n, (start, end) in enumerate(zip(drift_starts, ends, strict=True)):
        messages += [{**m, "job": f"{DRIFT_FLEET}-{n}", "incident_id": f"{m['incident_id']}@{n}"}
                     for m in read_alerts(settings, topics.incidents, start, {"fleet"}, end)]
    ch_count = clickhouse_incidents(settings, jobs, {str(m["incident_id"]) for m in fleet_messages})
    if not args.keep_topics:
        print(f"• this run's {len(expire_topics(settings, topics))} topics expire at the broker's next retention "
              "check (--keep-topics keeps their data)", flush=True)
    records = [run_record(label, run) for label, run in all_runs]
    phase_of = {r.job.job_id: n for n, phase in enumerate(drift_phases) for _, r in phase}
    for rec in records:
        rec["fleet"] = f"{DRIFT_FLEET}-{phase_of[rec['job']]}" if rec["job"] in phase_of else None
    (gt_dir / "runs.json").write_bytes(orjson.dumps(records, option=orjson.OPT_INDENT_2))
    (gt_dir / "alerts.jsonl").write_bytes(b"".join(orjson.dumps(m) + b"\n" for m in messages))
    result = score_records(records, messages)
    result.update({"machine": machine(), "started": started, "git": git_commit(), "quick": bool(args.quick),
                   "packed": bool(args.packed), "traits": run_traits(args).to_dict(),
                   "duration_s": round(time.monotonic() - t0, 1),
                   "incidents_clickhouse": ch_count,
                   "ground_truth_dir": str(gt_dir.relative_to(REPO_ROOT))})
    return result


def _wait_finished_or_warn(settings: Settings, jobs: set[str], timeout_s: float = 120.0) -> None:
    """`wait_jobs_finished`, and a warning naming the jobs it gave up on."""
    left = wait_jobs_finished(settings, jobs, timeout_s)
    if left:
        print(f"• WARNING: {len(left)} jobs not finished in the detect worker {timeout_s:.0f} s after the lag "
              f"reached 0 (their last incidents may be missing): {sorted(left)[:5]}", flush=True)


def run_record(label: str, run: SimRun) -> dict[str, Any]:
    """What scoring needs of one run, saved next to its ground truth (for --rescore)."""
    return {"label": label, "job": run.job.job_id, "seed": run.job.seed, "ranks": run.job.world,
            "steps": run.job.steps, "rank_steps": run.rank_steps, "paced": label.endswith("@paced"),
            "attempts": 1 + len(run.later),
            "traits": run.job.traits.to_dict(),
            "onset_ns": {str(k): v for k, v in run.onset_ns.items()},
            "faults": [f.to_dict(run.job.job_id, run.job.seed, run.job.steps) for f in run.faults]}


def score_records(records: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """detection.json's figures from saved runs and alert messages (pure)."""
    incidents = latest_incidents(messages)
    scores: dict[str, list[RunScore]] = {}
    meta: dict[str, dict[str, Any]] = {}
    fleets: dict[str, tuple[str, list[dict[str, Any]]]] = {}  # fleet incident job -> (label, its jobs' faults)
    for rec in records:
        fleet = rec.get("fleet")
        if fleet:  # a fleet's fault: found by ONE fleet incident; the job's own incidents answer nothing
            fleets.setdefault(fleet, (rec["label"], []))[1].extend(rec["faults"])
        truth = RunTruth(job=rec["job"], faults=[] if fleet else rec["faults"], total_steps=rec["steps"],
                         rank_steps=rec["rank_steps"], onset_ns={int(k): int(v) for k, v in rec["onset_ns"].items()},
                         paced=rec["paced"])
        scores.setdefault(rec["label"], []).append(score_run(truth, incidents))
        m = meta.setdefault(rec["label"], {"ranks": rec["ranks"], "seeds": 0, "steps": rec["steps"], "attempts": 0})
        m["seeds"] += 1
        m["attempts"] += int(rec.get("attempts", 1))  # launches over the seeds (a relaunch is one more)
    for fleet, (label, faults) in fleets.items():
        scores[label].append(score_run(fleet_truth(fleet, faults), incidents))
    stray = sorted({i.incident_id for i in incidents if i.job == "fleet"})
    scenarios = {}
    for label, runs_scores in scores.items():
        sc = SCENARIOS[label.split("@")[0]]
        scenarios[label] = {**summarise(runs_scores), **meta[label], "expected_rules": list(sc.rules),
                            "layer": sc.layer}
    healthy = [r for label, rs in scores.items() if SCENARIOS[label.split("@")[0]].layer == "healthy" for r in rs]
    return {"scenarios": scenarios, "false_alarms_per_100k_rank_steps": false_alarms_per_100k(healthy),
            "false_alarms_per_job_day": false_alarms_per_job_day(healthy),
            "healthy_rank_steps": sum(r.rank_steps for r in healthy), "incidents_alerts_topic": len(incidents),
            "fleet_false_alarms": len(stray)}


def fleet_truth(fleet: str, faults: list[dict[str, Any]]) -> RunTruth:
    """One fleet-wide fault from its jobs' (alike) faults: on their link class or device kind, scored against the
    fleet incidents (`fleet`); their "steps" are the fleet's judgements, so in time whenever, no delay in steps."""
    first = faults[0]
    network = first["kind"] in ("socket_fallback", "fabric_degraded")
    fault = {**first, "scope": "link" if network else "device", "links": ["inter"] if network else [], "ranks": [],
             "hosts": [], "start_step": 0, "end_step": None, "fleet": True}  # scored by steplens.scoring's rules
    # for a fleet fault: any incident of the fleet touches it; localised by its scope (and link class)
    return RunTruth(job=fleet, faults=[fault], total_steps=FLEET_ROUNDS, rank_steps=0)


def write_result(out: Path, result: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(render_table(result))
    print(f"wrote {out}")


def rescore(directory: Path, out: Path) -> int:
    """Score a finished run again (e.g. after a scorer change) from its saved runs and alerts."""
    records = orjson.loads((directory / "runs.json").read_bytes())
    messages = [orjson.loads(line) for line in (directory / "alerts.jsonl").read_bytes().splitlines() if line]
    old = orjson.loads(out.read_bytes()) if out.exists() else {}
    result = {**{k: v for k, v in old.items() if k not in ("scenarios",)}, **score_records(records, messages),
              "rescored": datetime.now(UTC).isoformat(timespec="seconds"), "scorer_git": git_commit()}
    write_result(out, result)
    return 0


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def render_table(result: dict[str, Any]) -> str:
    cols = ("ranks", "seeds", "recall", "precision", "localisation", "rule_attribution", "incidents_per_fault",
            "delay_steps_p50", "delay_steps_p99", "delay_s_p50", "false_alarms")
    lines = ["| scenario | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in sorted(result["scenarios"].items()):
        lines.append(f"| {name} | " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    lines.append(f"\nfalse alarms per 100k healthy rank-steps: {result['false_alarms_per_100k_rank_steps']:.1f} "
                 f"({result['healthy_rank_steps']} healthy rank-steps); incidents: alerts topic "
                 f"{result['incidents_alerts_topic']}, ClickHouse {result.get('incidents_clickhouse', '–')}; "
                 f"fleet incidents outside a drift: {result.get('fleet_false_alarms', '–')}; "
                 f"{result.get('duration_s', 0):.0f}s")
    if result.get("traits"):
        traits = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in result["traits"].items())
        lines.append(f"simulator traits: {traits}")
    day = result.get("false_alarms_per_job_day") or {}
    if day.get("upper_95") is not None:
        lines.append(f"false alarms per 10,240-rank job-day: {day['observed']:.0f} observed, at most "
                     f"{day['upper_95']:.0f} (95 % upper bound from this many healthy rank-steps)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
