"""`make bench-overhead`: what the rank hook costs a real DDP training job.

The DDP transformer workload (producers/workloads/ddp_transformer.py, 4 ranks, gloo on
loopback, sending to the real Kafka) runs once with three modes interleaved in blocks of
steps inside the same process group: no hook, hook, torch.profiler always on, each round in a
rotated order (ABC, BCA, CAB). Interleaving cancels the drift of this shared, loaded machine and
rotation cancels what one mode leaves to the next; the first round and the first step of every
block (mode switch) are discarded.

hook_ratio = median step time with hook / median without; hook_ratio_noise = half-width of the
95 % bootstrap interval of that ratio of medians (steps resampled within each mode); the same
for profiler_ratio. us_per_event: time inside hook entry points on
the training thread per event emitted, in the workload (includes preemption by the other
ranks) and in isolation (one process, no other load).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from producers.workloads.ddp_transformer import WorkloadConfig, load_results, run

MODES = ("none", "hook", "profiler")
OUT = Path(__file__).resolve().parent / "results" / "overhead.json"


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    return {"cores": os.cpu_count(), "memory_gb": round(mem / 2**30, 1), "cpu": cpu}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def isolated_us_per_event(steps: int = 5000) -> float:
    """The hook's whole CPU cost per event (training thread + builder thread, until flushed to an
    in-memory exporter), one process, no training: what it takes away from a core per event."""
    from producers.emitter import BackgroundEmitter
    from producers.exporter import InMemoryExporter
    from producers.hook.core import RankHook, RankInfo
    from schemas import Domain

    hook = RankHook(RankInfo("bench", 0, 4, "h", 0, {"dp": Domain(group=0, size=4, index=0)}),
                    lambda: BackgroundEmitter(InMemoryExporter(), max_queue=4 * steps), track_gc=True)
    hook.open()
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        hook.step_begin()
        hook.phase_begin("forward")
        hook.phase_end("forward")
        hook.record_collective("allreduce", 1000, nbytes=4096, domain="dp", group_size=4)
        hook.step_end(samples=8, tokens=256)
    hook.flush(60.0)
    wall = time.perf_counter_ns() - t0
    events = hook.stats().events
    hook.close(10.0)
    return wall / 1e3 / max(events, 1)


def analyse(times: list[tuple[str, float]], block: int) -> dict[str, Any]:
    """Per-mode medians and per-round ratios from rank 0's (mode, ms) list."""
    blocks: list[tuple[str, list[float]]] = []
    for i in range(0, len(times), block):
        chunk = times[i:i + block]
        blocks.append((chunk[0][0], [ms for _, ms in chunk[1:]]))  # first step of a block: mode switch
    rounds = [blocks[i:i + len(MODES)] for i in range(0, len(blocks), len(MODES))][1:]  # round 0: warm-up
    rounds = [r for r in rounds if len(r) == len(MODES)]
    per_mode: dict[str, list[float]] = {m: [] for m in MODES}
    ratios: dict[str, list[float]] = {"hook": [], "profiler": []}
    for rnd in rounds:
        med = {mode: statistics.median(v) for mode, v in rnd}
        for mode, v in rnd:
            per_mode[mode].extend(v)
        for m in ratios:
            ratios[m].append(med[m] / med["none"])
    medians = {m: statistics.median(v) for m, v in per_mode.items()}

    rng = np.random.default_rng(0)
    arrays = {m: np.asarray(v) for m, v in per_mode.items()}

    def noise(mode: str, draws: int = 2000) -> float:
        a, b = arrays[mode], arrays["none"]
        ra = np.median(rng.choice(a, (draws, a.size)), axis=1)
        rb = np.median(rng.choice(b, (draws, b.size)), axis=1)
        lo, hi = np.percentile(ra / rb, [2.5, 97.5])
        return float(hi - lo) / 2

    return {
        "medians_ms": medians,
        "hook_ratio": medians["hook"] / medians["none"],
        "hook_ratio_noise": noise("hook"),
        "profiler_ratio": medians["profiler"] / medians["none"],
        "profiler_ratio_noise": noise("profiler"),
        "per_round_ratios": ratios,
        "rounds": len(rounds),
        "steps_per_mode": {m: len(v) for m, v in per_mode.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--block", type=int, default=6)
    p.add_argument("--rounds", type=int, default=12,
                   help="rounds of (none, hook, profiler) blocks, the first is warm-up")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)

    from infra import InfraConfig, KafkaBroker
    from steplens.config import load_settings
    from streams.topics_admin import ensure_topics

    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    broker = KafkaBroker(InfraConfig.from_env())
    broker.install()
    started = broker.start()
    try:
        settings = load_settings()
        prefix = f"bench{int(time.time())}."
        from dataclasses import replace

        from schemas import Topics

        settings = replace(settings, kafka_bootstrap=broker.bootstrap, topic_prefix=prefix)
        ensure_topics(settings, Topics(prefix), settings.topic_partitions)
        with tempfile.TemporaryDirectory() as tmp:
            env = {"STEPLENS_KAFKA_BOOTSTRAP": broker.bootstrap, "STEPLENS_TOPIC_PREFIX": prefix,
                   "STEPLENS_HOME": str(Path(tmp) / "home")}
            cfg = WorkloadConfig(job=f"bench-overhead-{int(time.time())}", world=a.world,
                                 steps=a.block * len(MODES) * a.rounds, schedule=MODES, block=a.block,
                                 follow_control=False, out_dir=str(Path(tmp) / "out"), env=env)
            t0 = time.monotonic()
            run(cfg)
            wall = time.monotonic() - t0
            results = load_results(Path(cfg.out_dir))
    finally:
        if started:
            broker.stop()
    rank0 = next(r for r in results if r["rank"] == 0)
    stats = analyse([(m, ms) for m, ms in rank0["times"]], a.block)
    us_events = [r["us_per_event"] for r in results if r["us_per_event"] is not None]
    dropped = sum(sum((r["emitter_dropped"] or {}).values()) for r in results)
    iso_us = isolated_us_per_event()
    hook_steps = [r["hook"]["steps"] for r in results if r["hook"]]
    events_per_step = statistics.median(
        [r["hook"]["events"] / r["hook"]["steps"] for r in results if r["hook"] and r["hook"]["steps"]]) \
        if hook_steps else 2.0
    doc = {
        "hook_ratio": round(stats["hook_ratio"], 5),
        "hook_ratio_noise": round(stats["hook_ratio_noise"], 5),
        "profiler_ratio": round(stats["profiler_ratio"], 4),
        "profiler_ratio_noise": round(stats["profiler_ratio_noise"], 4),
        "us_per_event": round(statistics.median(us_events), 2),
        "us_per_event_isolated": round(iso_us, 2),
        # what the hook's own CPU time per step would cost, independent of the step-time noise:
        # (events per step x us per event) / median step time without hook
        "hook_cost_ratio": round(1 + events_per_step * iso_us / (stats["medians_ms"]["none"] * 1000), 6),
        "steps": cfg.steps,
        "steps_per_mode": stats["steps_per_mode"],
        "median_step_ms": {m: round(v, 3) for m, v in stats["medians_ms"].items()},
        "rounds": stats["rounds"],
        "world": a.world,
        "events_dropped": dropped,
        "device": "cpu (gloo, loopback; no accelerator lent to this task)",
        "workload": "tiny transformer LM (2 layers, d=64, seq 32, batch 8), PyTorch DDP, torch "
                    + __import__("torch").__version__,
        "wall_s": round(wall, 1),
        "machine": machine(),
        "started": started_at,
        "git": git_commit(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(f"{'mode':<10} {'median step ms':>15} {'ratio vs none':>14}")
    for m in MODES:
        ratio = stats["medians_ms"][m] / stats["medians_ms"]["none"]
        print(f"{m:<10} {stats['medians_ms'][m]:>15.2f} {ratio:>14.4f}")
    print(f"hook_ratio {doc['hook_ratio']} ± {doc['hook_ratio_noise']} (95 %, {stats['rounds']} rounds); "
          f"profiler_ratio {doc['profiler_ratio']}; us_per_event {doc['us_per_event']} in the workload, "
          f"{doc['us_per_event_isolated']} isolated (cost ratio {doc['hook_cost_ratio']}); dropped {dropped}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
