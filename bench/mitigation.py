"""`make bench-mitigation`: what the mitigation policy saves per fault class, and what it gets wrong.

Two halves, each real where it can be:
1. **What the policy sees.** Every fault class below runs through the simulator and the real detection
   engine in process (bench/detection/replay.py: the bench plan's decode and engine, no Kafka); the policy
   sees the detector's own incidents for the job (rule, host, cause, figures), healthy jobs' false alarms
   included. The job's true slowdown is measured from its step times (the fault's steps against the steps
   before it), not taken from the incident.
2. **What acting is worth (what-if, in cluster time).** Each incident is given fault durations from
   minutes to a day, on a job of `--job-gpus` GPUs with a day left, a checkpoint every
   `--checkpoint-s`, relaunches taking `--relaunch-s`. The policy and guard rails (streams/mitigate/) are
   asked every `--interval-s` from the detection on, with a fleet history of the class drawn from a mixture
   (most faults transient, some persistent). Without the policy the job pays `slowdown x GPUs` for the
   whole fault; with it, until the policy relaunches it without the node, then the work since its last
   checkpoint and the relaunch, and the node's devices for the rest of the fault (counted against the
   policy: a faulty node's capacity is not all lost in truth).
   Every drain or relaunch the what-if takes is then carried out on the loopback Slurm
   (infra/launcher/slurm.py) through the `Slurm` adapter, checked in `sinfo -R` and resumed.

A wrong action: a drain or relaunch on a healthy job, on a fault no drain fixes (data loading, GC), or on a
fault shorter than its break-even ((checkpoint / 2 + relaunch) / slowdown: below it, waiting costs less).
Writes bench/results/mitigation.json (keys in ../shared/bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.detection.replay import replay
from bench.provenance import git_commit, machine
from schemas import Incident, Topics
from schemas.codec import decode_as
from streams.mitigate.act import Mitigator
from streams.mitigate.guard import GuardParams, drain_reason
from streams.mitigate.policy import JobCosts, PolicyParams, drainable, measured_slowdown, slowdown_of
from streams.mitigate.scheduler import MemoryScheduler

OUT = Path(__file__).resolve().parent / "results" / "mitigation.json"
S = 1_000_000_000

# fault class -> what it is: "node" (a drain can fix it), "software" / "data" (it follows the job), "healthy"
CLASSES: dict[str, str] = {
    "slow_host": "node", "chip_degradation": "node", "link_degradation": "node", "unstable_power": "node",
    "cooling_loss": "node",
    "gc_leak": "software", "gc_scatter": "software", "slow_data_rank": "data", "heavy_preprocessing": "data",
    "healthy": "healthy", "healthy_jittery": "healthy",
}
DURATIONS_S = (60, 300, 1800, 7200, 28800, 86400)  # a transient minute to a day
PERSISTENT_S = 7200  # "persistent host/link faults" of the acceptance bar: those that last this long or more


@dataclass(frozen=True, slots=True)
class Fleet:
    """The what-if's job and cluster."""

    job_gpus: int
    node_gpus: int
    nodes: int
    checkpoint_s: float
    relaunch_s: float
    interval_s: float
    job_left_s: float

    def costs(self) -> JobCosts:
        return JobCosts(job_gpus=self.job_gpus, since_checkpoint_s=self.checkpoint_s / 2, relaunch_s=self.relaunch_s,
                        node_gpus=self.node_gpus)


def history(seed: int, n: int = 200) -> list[float]:
    """The fleet's past durations of a fault class: 70 % transient (exponential, mean 5 min), 30 % persistent
    (log-normal, median 6 h): what the policy's expected remaining duration is drawn from."""
    rng = np.random.default_rng(seed)
    transient = rng.exponential(300.0, size=int(n * 0.7))
    persistent = rng.lognormal(np.log(6 * 3600.0), 1.0, size=n - len(transient))
    return [float(x) for x in np.concatenate([transient, persistent])]


def step_times(messages: list[tuple[str, bytes]]) -> dict[str, dict[int, float]]:
    """Per job and step, the slowest rank's step duration in ms (attempt 0): the job's pace, as the
    `steps_by_step` rollup keeps it (`max_ms`) for the worker's JobPace."""
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _, value in messages:
        doc = orjson.loads(value)
        for event in doc if isinstance(doc, list) else [doc]:
            if event.get("type") == "step" and not event.get("attempt"):
                per[event["job"]][int(event["step"])].append((event["end_ns"] - event["start_ns"]) / 1e6)
    return {job: {step: max(d) for step, d in steps.items()} for job, steps in per.items()}


def true_slowdown(steps: dict[int, float], start: int, end: int | None) -> float:
    """Share of throughput the fault cost over its whole window (the warm-up's first 5 steps left out): the
    policy's own measure (`measured_slowdown`: the window's mean step time against the median before) on the
    fault's steps rather than the incident's; 0 when it cost nothing."""
    return measured_slowdown([(s, t) for s, t in steps.items() if s >= 5], start, end) or 0.0


@dataclass(slots=True)
class Outcome:
    lost_without_gpu_h: float
    lost_with_gpu_h: float
    actions: list[tuple[str, str, float]]  # (level, host, age_s)


def what_if(incident: Incident, slowdown: float, duration_s: float, fleet: Fleet, past: list[float],
            measured: float | None) -> Outcome:
    """One fault of `duration_s` behind `incident`, with and without the policy (GPU-hours). `slowdown` is the
    truth the job pays; the policy sees `measured` (the job's pace around the incident, as JobPace reads it)
    or, without it, the incident's figures."""
    paid_s = min(duration_s, fleet.job_left_s)
    without = slowdown * fleet.job_gpus * paid_s / 3600
    nodes = [f"node-{i}" for i in range(fleet.nodes)]
    partition = MemoryScheduler(nodes)  # the real Slurm carries the actions out afterwards (on_slurm)
    mitigator = Mitigator(partition, "p", PolicyParams(), GuardParams(enabled_partitions=frozenset({"p"}),
                                                                      max_drained_share=0.1))
    opened = replace(incident, detected_ns=0, state="open")
    actions: list[tuple[str, str, float]] = []
    age = 0.0
    while age < paid_s:
        record = mitigator.handle(opened, fleet.costs(), past, int(age * S), slowdown=measured)
        if record.verdict == "act":
            actions.append((record.decision.level, record.decision.host or "", age))
            if record.decision.level == "relaunch":
                lost = (slowdown * fleet.job_gpus * age + fleet.job_gpus * (fleet.checkpoint_s / 2 + fleet.relaunch_s)
                        + fleet.node_gpus * (duration_s - age)) / 3600
                return Outcome(without, lost, actions)
        age += fleet.interval_s
    return Outcome(without, without, actions)


def wrong(kind: str, slowdown: float, duration_s: float, fleet: Fleet) -> bool:
    """Whether a drain or relaunch of this fault is wrong: not the node's, or shorter than its break-even."""
    if kind != "node" or slowdown <= 0:
        return True
    return duration_s < (fleet.checkpoint_s / 2 + fleet.relaunch_s) / slowdown


def on_slurm(actions: list[tuple[str, str]], env: dict[str, str] | None) -> tuple[int, str]:
    """Carry out each (incident, level) drain on the loopback Slurm, check `sinfo -R`, resume; (done, version)."""
    from infra.launcher.slurm import PARTITION, node_names
    from streams.mitigate.scheduler import Slurm

    slurm = Slurm(env)
    names = node_names()
    done = 0
    for n, (incident_id, level) in enumerate(actions):
        node = names[n % len(names)]
        reason = drain_reason(incident_id, "bench", level)
        slurm.drain(node, reason)
        shown = subprocess.run(["sinfo", "-R", "--noheader", "--format=%N|%E"], env=env, capture_output=True,
                               text=True, check=True, timeout=30).stdout
        if f"{node}|{reason}" in shown:
            done += 1
        slurm.resume(node)
        deadline = time.monotonic() + 30
        while not slurm.nodes(PARTITION)[node].available and time.monotonic() < deadline:
            time.sleep(0.2)
    version = subprocess.run(["sinfo", "--version"], env=env, capture_output=True, text=True, timeout=30).stdout
    return done, version.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mitigation", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--ranks", type=int, default=32)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--job-gpus", type=int, default=1024)
    p.add_argument("--checkpoint-s", type=float, default=1800.0)
    p.add_argument("--relaunch-s", type=float, default=300.0)
    p.add_argument("--interval-s", type=float, default=30.0)
    p.add_argument("--scenario", action="append", help="only these fault classes (repeatable)")
    p.add_argument("--no-slurm", action="store_true", help="do not carry the actions out on the loopback Slurm")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    fleet = Fleet(job_gpus=args.job_gpus, node_gpus=8, nodes=args.job_gpus // 8, checkpoint_s=args.checkpoint_s,
                  relaunch_s=args.relaunch_s, interval_s=args.interval_s, job_left_s=24 * 3600.0)
    names = args.scenario or list(CLASSES)
    steps_topic = Topics("").steps
    sent: list[tuple[str, bytes]] = []

    def keep(topic: str, key: bytes, value: bytes) -> None:
        if topic == steps_topic:
            sent.append((topic, value))

    plan = argparse.Namespace(quick=False, scenario=[n for n in names if not n.startswith("healthy")] or ["slow_host"],
                              seeds=args.seeds, ranks=args.ranks, large_ranks=args.ranks, steps=args.steps,
                              healthy_runs=args.seeds * 2 if "healthy" in names else 0, large_healthy_runs=0,
                              jittery_runs=args.seeds if "healthy_jittery" in names else 0, trait_off=None, packed=True)
    detected = replay(plan, on_send=keep)
    paces = step_times(sent)
    latest: dict[str, dict[str, Any]] = {}
    for m in detected["messages"]:
        latest[m["incident_id"]] = m
    by_job: dict[str, list[Incident]] = defaultdict(list)
    for m in latest.values():
        by_job[m["job"]].append(decode_as(Incident, orjson.dumps({**m, "type": "incident", "v": "1.5"})))
    classes: dict[str, dict[str, Any]] = {}
    wrong_drains = 0
    to_slurm: list[tuple[str, str]] = []
    for label, run in detected["runs"]:
        name = label.split("@")[0]
        if name not in CLASSES:
            continue
        kind = CLASSES[name]
        fault = next((f for f in run.faults if f.attempt == 0), None)
        slow = true_slowdown(paces.get(run.job.job_id, {}), fault.start, fault.end) if fault else 0.0
        row = classes.setdefault(name, {"kind": kind, "runs": 0, "incidents": 0, "gpu_hours_lost_without": 0.0,
                                        "gpu_hours_lost_with": 0.0, "persistent_without": 0.0,
                                        "persistent_with": 0.0, "actions": 0, "wrong_actions": 0,
                                        "true_slowdown": [], "seen_slowdown": [], "not_drainable": []})
        row["runs"] += 1
        row["true_slowdown"].append(round(slow, 3))
        incidents = [i for i in by_job.get(run.job.job_id, []) if i.host is not None]
        row["incidents"] += len(incidents)
        pace = sorted(paces.get(run.job.job_id, {}).items())
        for n, incident in enumerate(incidents):
            measured = measured_slowdown(pace, incident.step_first, incident.step_last)
            row["seen_slowdown"].append(round(slowdown_of(incident) if measured is None else measured, 3))
            why = drainable(incident)
            if why is not None:
                row["not_drainable"].append(why[:80])
            for duration in DURATIONS_S:
                outcome = what_if(incident, slow, duration, fleet, history(seed=n), measured)
                row["gpu_hours_lost_without"] += outcome.lost_without_gpu_h
                row["gpu_hours_lost_with"] += outcome.lost_with_gpu_h
                if duration >= PERSISTENT_S:
                    row["persistent_without"] += outcome.lost_without_gpu_h
                    row["persistent_with"] += outcome.lost_with_gpu_h
                row["actions"] += len(outcome.actions)
                bad = sum(wrong(kind, slow, duration, fleet) for _ in outcome.actions)
                row["wrong_actions"] += bad
                wrong_drains += bad
                to_slurm += [(f"{incident.incident_id}@{duration}", level) for level, _, _ in outcome.actions[:1]]
    for row in classes.values():
        lost = row["gpu_hours_lost_without"]
        row["recovered_share"] = round(1 - row["gpu_hours_lost_with"] / lost, 3) if lost > 0 else None
        pl = row["persistent_without"]
        row["persistent_recovered_share"] = round(1 - row["persistent_with"] / pl, 3) if pl > 0 else None
        for key in ("gpu_hours_lost_without", "gpu_hours_lost_with", "persistent_without", "persistent_with"):
            row[key] = round(row[key], 1)
        row["not_drainable"] = sorted(set(row["not_drainable"]))
    node_rows = [r for r in classes.values() if r["kind"] == "node"]
    persistent_without = sum(r["persistent_without"] for r in node_rows)
    persistent_with = sum(r["persistent_with"] for r in node_rows)
    scheduler = "in memory (--no-slurm)"
    slurm_done = 0
    if not args.no_slurm and to_slurm:
        from infra.launcher import InfraConfig
        from infra.launcher.slurm import SlurmCluster

        cluster = SlurmCluster(InfraConfig.from_env())
        ours = cluster.start()
        try:
            slurm_done, scheduler = on_slurm(to_slurm, dict(cluster.client_env()))
        finally:
            if ours:  # leave the machine as found
                cluster.stop()
    result = {
        "started": started, "git": git_commit(), "machine": machine(), "duration_s": round(time.monotonic() - t0, 1),
        "classes": classes, "wrong_drains": wrong_drains, "scheduler": scheduler,
        "persistent_node_recovered_share": (round(1 - persistent_with / persistent_without, 3)
                                            if persistent_without > 0 else None),
        "actions_on_slurm": {"taken": len(to_slurm), "seen_in_sinfo": slurm_done},
        "what_if": {"job_gpus": fleet.job_gpus, "node_gpus": fleet.node_gpus, "checkpoint_s": fleet.checkpoint_s,
                    "relaunch_s": fleet.relaunch_s, "interval_s": fleet.interval_s, "durations_s": list(DURATIONS_S),
                    "persistent_from_s": PERSISTENT_S, "history": "70 % exponential mean 300 s, 30 % log-normal "
                                                               "median 6 h (sigma 1)"},
        "detection": {"ranks": args.ranks, "steps": args.steps, "seeds": args.seeds,
                      "mode": "in-process replay (bench/detection/replay.py)"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print("| class | kind | incidents | GPU-h lost without | with | recovered | persistent recovered | actions "
          "| wrong |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in classes.items():
        print(f"| {name} | {r['kind']} | {r['incidents']} | {r['gpu_hours_lost_without']} | {r['gpu_hours_lost_with']} "
              f"| {r['recovered_share']} | {r['persistent_recovered_share']} | {r['actions']} | {r['wrong_actions']} |")
    print(f"wrong drains {wrong_drains}; persistent node faults recovered {result['persistent_node_recovered_share']}; "
          f"scheduler {scheduler}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
