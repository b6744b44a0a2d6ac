"""`make bench-overhead`: what the rank hook costs a real DDP training job.

Two measurements, because wall-clock step times on this shared box are far noisier than the
0.1 % target:

1. Wall clock, real job. The DDP transformer workload (producers/workloads/ddp_transformer.py,
   4 ranks pinned one per core, gloo on loopback, sending to the real Kafka) runs the three modes
   -- no hook, hook, torch.profiler always on -- and the ablations (ABLATIONS: the hook with the
   opt-in Python DDP comm hook, that comm hook alone, the hook without sending) interleaved in
   many short blocks inside the same process group, each round in a rotated order (ABC, BCA,
   CAB, ...), so drift and background load hit every mode alike. The first round and the first
   step of every block (mode switch) are discarded; a step's time is the mean over ranks. Modes
   without the Python comm hook train a replica with DDP's built-in all-reduce (DDP takes one comm
   hook for its lifetime), so `none` runs none of the hook's code. <mode>_ratio = median step in
   that mode / median without hook, with a 95 % bootstrap interval that resamples whole rounds
   (bench/stats.py); also the median of per-round paired ratios. Then (`--abba-steps`) a second
   run of the same job alternates none and hook step by step (none, hook, hook, none, ...):
   `hook_ratio_abba*`, where neighbouring steps share the machine's state and drift cancels.
2. Training-thread CPU cost (bench/hook_cost.py): hooked and plain steps of a small DDP model
   alternate step by step in one pinned process; the median paired difference of the training
   thread's CPU time is the hook's cost per step (`us_per_event` = that / events per step).
   hook_cost_ratio = 1 + that cost / median step without hook: a *cost-based* ratio, not a
   wall-clock measurement.
3. Helper-thread CPU, real job: each rank's CPU seconds per thread (from /proc) over the run; the
   hook's threads (builder, emitter, export, kafka-python's network thread) per hooked step.
   hook_total_cost_ratio = 1 + (training-thread cost + that helper CPU) / median step without
   hook: what the hook costs when every core is busy with training (as on this 2-core box, where
   4 ranks share the cores), so that helper CPU is taken from training. Also cost-based.
   The job runs with packed records (contract 1.2, STEPLENS_EMIT_PACK) unless `--no-pack`; beside
   it, bench/hook_cost.py's `--helpers` run measures the same helper threads packed and unpacked
   side by side against the same broker (no model, steps paced at the job's step time).

`--device cuda` (the GPU figure; run where a GPU is lent, e.g. `make bench-overhead-gpu`): the same
workload on CUDA, one rank per GPU with NCCL and a GPT-style model sized for a GPU (GPU_MODEL), the
modes none, hook, profiler (CPU+CUDA activities) and the hook_nosend ablation interleaved as above,
sending to a real Kafka broker on that machine; written to bench/results/overhead-gpu.json. Part 1
only (and its ABBA run): the CPU-cost parts measure the hook's Python work, which does not depend
on the device. A GPU machine that reaches nothing outside gets its Java and Kafka jars from
bench/gpu/bundle.sh (carried) and bench/gpu/device_setup.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.provenance import git_commit, machine
from bench.stats import Estimate, cost_ratio, median_ci, paired_ratio_ci, ratio_of_medians_ci
from producers.workloads.ddp_transformer import HOOKED, WorkloadConfig, load_results, run

MODES = ("none", "hook", "profiler")
# Ablations run side by side with MODES (same rounds, same interleaving): where the hook's wall time goes.
ABLATIONS = {
    "hook_pycomm": "the hook with the opt-in Python DDP comm hook timing every bucket's all-reduce",
    "pycomm": "that Python comm hook alone (pass-through all-reduce), no other hook code",
    "hook_nosend": "the hook, its events built and encoded but not sent to Kafka",
}
OUT = Path(__file__).resolve().parent / "results" / "overhead.json"
OUT_GPU = OUT.with_name("overhead-gpu.json")
# the GPU run's model: a small GPT-style LM (~190 M parameters) whose step is GPU-bound tens of ms on one H100
GPU_MODEL = {"batch": 8, "seq": 1024, "vocab": 32768, "hidden": 1024, "heads": 16, "layers": 12, "ffn": 4096}
GPU_MODES = ("none", "hook", "profiler", "hook_nosend")
ABBA_WARM_STEPS = 40  # the step-by-step run's first steps (CUDA warm-up, clocks ramping) are dropped


TARGET = 1.001


class LoadSampler:
    """Samples the 1-minute load average every few seconds while the bench runs (reported with it)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.samples.append(os.getloadavg()[0])

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        x = self.samples
        return {"start": round(x[0], 2), "end": round(x[-1], 2), "min": round(min(x), 2), "max": round(max(x), 2),
                "mean": round(statistics.fmean(x), 2), "samples": len(x)}


def rounds_of(times: list[tuple[str, float]], block: int,
              modes: tuple[str, ...] = MODES) -> list[dict[str, list[float]]]:
    """Per round, each mode's block of step times (ms), without the block's first step (mode switch)
    and without round 0 (warm-up); incomplete rounds are dropped."""
    blocks: list[tuple[str, list[float]]] = []
    for i in range(0, len(times), block):
        chunk = times[i:i + block]
        blocks.append((chunk[0][0], [ms for _, ms in chunk[1:]]))
    out: list[dict[str, list[float]]] = []
    for i in range(len(modes), len(blocks) - len(modes) + 1, len(modes)):
        rnd = dict(blocks[i:i + len(modes)])
        if set(rnd) == set(modes) and all(rnd.values()):
            out.append(rnd)
    return out


def mean_over_ranks(per_rank: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Step i's time = mean over ranks (they run the same schedule; DDP keeps them in lock-step)."""
    n = min(len(t) for t in per_rank)
    return [(per_rank[0][i][0], float(np.mean([t[i][1] for t in per_rank]))) for i in range(n)]


def job_step_times(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The job's (mode, step ms) series from the ranks' result files (`times`: [mode, ms] pairs)."""
    return mean_over_ranks([[(m, ms) for m, ms in r["times"]] for r in results])


def analyse(times: list[tuple[str, float]], block: int, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    rounds = rounds_of(times, block, modes)
    if not rounds:
        raise ValueError("no complete round of blocks: run more rounds")
    col = {m: [r[m] for r in rounds] for m in modes}
    out: dict[str, Any] = {"rounds": len(rounds), "steps_per_mode": {m: sum(len(b) for b in col[m]) for m in modes}}
    out["median_step_ms"] = {m: statistics.median([x for b in col[m] for x in b]) for m in modes}
    out["none_step_ms"] = median_ci([statistics.median(b) for b in col["none"]], seed=7)
    for m in modes[1:]:
        out[f"{m}_ratio"] = ratio_of_medians_ci(col[m], col["none"], seed=11)
        out[f"{m}_ratio_paired"] = paired_ratio_ci(col[m], col["none"], seed=13)
    return out


def print_modes(stats: dict[str, Any], modes: tuple[str, ...]) -> None:
    print(f"{'mode':<12} {'median step ms':>15} {'ratio vs none (95 % CI, rounds resampled)':>44} {'paired':>26}")
    for m in modes:
        if m == "none":
            print(f"{m:<12} {stats['median_step_ms'][m]:>15.2f}")
            continue
        e, q = stats[f"{m}_ratio"], stats[f"{m}_ratio_paired"]
        print(f"{m:<12} {stats['median_step_ms'][m]:>15.2f} {e.value:>14.4f} [{e.lo:.4f}, {e.hi:.4f}]"
              f"{'':>12}{q.value:.4f} [{q.lo:.4f}, {q.hi:.4f}]")


def cpu_per_step(results: list[dict[str, Any]]) -> dict[str, float]:
    """Mean over ranks of each thread's CPU (by name) per step after the warm-up round, ms."""
    names = {n for r in results for n in (r.get("cpu_s") or {})}
    return {n: round(statistics.fmean((r.get("cpu_s") or {}).get(n, 0.0) * 1000 / max(r.get("cpu_steps") or 1, 1)
                                      for r in results), 3)
            for n in sorted(names)}


def hook_cost(pairs: int, parts: str | None, core: int | None, comm_timing: str = "reducer") -> dict[str, Any]:
    """bench/hook_cost.py in a fresh pinned process (its own process group, nothing else loaded)."""
    cmd = [sys.executable, "-m", "bench.hook_cost", "--pairs", str(pairs), "--comm-timing", comm_timing]
    if core is not None:
        cmd += ["--core", str(core)]
    if parts is not None:
        cmd += ["--parts", parts]
    res = subprocess.run(cmd, capture_output=True, check=True, cwd=Path(__file__).resolve().parent.parent)
    doc: dict[str, Any] = orjson.loads(res.stdout.splitlines()[-1])
    return doc


def helpers_cost(pack: bool, env: dict[str, str], step_ms: float, core: int | None,
                 interval_s: float | None = None, *, relay: bool = False, ranks: int = 1) -> dict[str, Any]:
    """bench/hook_cost.py --helpers in a fresh process: the hook's helper-thread CPU per step, real Kafka
    (or, `relay`, through a node relay process shared by `ranks` hooks)."""
    mode = "relay" if relay else "packed" if pack else "unpacked"
    cmd = [sys.executable, "-m", "bench.hook_cost", "--helpers", mode, "--ranks", str(ranks),
           "--step-ms", f"{step_ms:.3f}"]
    if interval_s is not None:
        cmd += ["--interval", str(interval_s)]
    if core is not None:
        cmd += ["--core", str(core)]
    res = subprocess.run(cmd, capture_output=True, check=True, cwd=Path(__file__).resolve().parent.parent,
                         env={**os.environ, **env})
    doc: dict[str, Any] = orjson.loads(res.stdout.splitlines()[-1])
    return doc


def relay_summary(side: dict[str, list[dict[str, Any]]], thread_us: float, step_us: float,
                  world: int) -> dict[str, Any]:
    """Top-level relay figures: the ranks' helper CPU through the relay with `world` ranks sharing it, the
    relay process's CPU per rank-step (reported apart: a node runs it on its spare cores), and cost-based
    ratios without and with that relay CPU."""
    relay = side.get(f"relay_{world}_ranks" if world > 1 else "relay")
    direct = side.get("packed")
    if not relay or not direct:
        return {}
    helper = statistics.median(d["helper_threads_cpu_us_per_step"] for d in relay)
    relay_us = statistics.median(d["relay_us_per_rank_step"] for d in relay)
    return {
        "helper_threads_direct_us_per_step": round(statistics.median(
            d["helper_threads_cpu_us_per_step"] for d in direct), 2),
        "helper_threads_relay_us_per_step": round(helper, 2),
        "relay_us_per_rank_step": round(relay_us, 2),
        "relay_ranks": world,
        "hook_total_cost_ratio_relay": round(1 + (thread_us + helper) / step_us, 6),
        "hook_total_cost_ratio_relay_incl_relay": round(1 + (thread_us + helper + relay_us) / step_us, 6),
        "relay_method": "bench/hook_cost.py --helpers relay --ranks N: N hooks (one process, each its own "
                        "emitter and Unix-socket connection) send to `python -m producers.relay` (its own "
                        "process, one Kafka client); helper_threads_relay_us_per_step = the hooks' helper "
                        "threads per rank-step; relay_us_per_rank_step = the relay process's CPU (all its "
                        "threads, /proc schedstat) per rank-step, after its producer is up; on a node it runs "
                        "on the cores the ranks leave (the host's spare CPU), hence reported apart: "
                        "hook_total_cost_ratio_relay = 1 + (training thread + rank helper threads) / step, "
                        "_incl_relay adds the relay's share as if it ran on training cores",
    }


def _est(e: Estimate, digits: int) -> dict[str, float]:
    return e.rounded(digits)


@contextlib.contextmanager
def kafka_for_ranks(pack: bool) -> Iterator[dict[str, str]]:
    """A real Kafka broker (started here unless one runs) with fresh bench topics; yields the ranks'
    environment that points them at it."""
    from infra.launcher import InfraConfig, KafkaBroker
    from infra.settings import load_settings
    from schemas import Topics
    from streams.topics_admin import ensure_topics

    broker = KafkaBroker(InfraConfig.from_env())
    broker.install()
    started = broker.start()
    try:
        prefix = f"bench{int(time.time())}."
        settings = replace(load_settings(), kafka_bootstrap=broker.bootstrap, topic_prefix=prefix)
        ensure_topics(settings, Topics(prefix), settings.topic_partitions)
        # STEPLENS_HOME stays: the ranks need its Kafka credentials to send at all
        yield {"STEPLENS_KAFKA_BOOTSTRAP": broker.bootstrap, "STEPLENS_TOPIC_PREFIX": prefix,
               "STEPLENS_EMIT_PACK": "1" if pack else "0"}
    finally:
        if started:
            broker.stop()


def wall_clock_verdict(hook_r: Estimate, extra: str) -> tuple[bool, str]:
    """Whether hook_ratio's 95 % interval settles the target (entirely above = missed, entirely at or
    below = met, else unresolved), and the sentence that says so."""
    resolved = hook_r.lo > TARGET or hook_r.hi <= TARGET
    if hook_r.lo > TARGET:
        return resolved, (f"target missed by wall clock: hook_ratio {hook_r.value:.4f}, 95 % interval "
                          f"[{hook_r.lo:.4f}, {hook_r.hi:.4f}] lies above {TARGET}; {extra}")
    if hook_r.hi <= TARGET:
        return resolved, (f"target met by wall clock: hook_ratio {hook_r.value:.4f}, 95 % interval "
                          f"[{hook_r.lo:.4f}, {hook_r.hi:.4f}] at or below {TARGET}; {extra}")
    return resolved, (f"not resolved by wall clock: the 95 % interval of hook_ratio [{hook_r.lo:.4f}, "
                      f"{hook_r.hi:.4f}] straddles {TARGET} (±{hook_r.half_width:.2%}); {extra}")


def wall_clock_fields(stats: dict[str, Any], resolved: bool, verdict: str) -> dict[str, Any]:
    """The result file's wall-clock keys (RESULTS.md: hook_ratio, its noise, profiler_ratio), from `analyse`."""
    hook_r: Estimate = stats["hook_ratio"]
    prof: Estimate = stats["profiler_ratio"]
    return {
        "hook_ratio": round(hook_r.value, 5),
        "hook_ratio_noise": round(hook_r.half_width, 5),
        "hook_ratio_ci95": _est(hook_r, 5),
        "hook_ratio_paired": _est(stats["hook_ratio_paired"], 5),
        "profiler_ratio": round(prof.value, 4),
        "profiler_ratio_noise": round(prof.half_width, 4),
        "profiler_ratio_ci95": _est(prof, 4),
        "profiler_ratio_paired": _est(stats["profiler_ratio_paired"], 4),
        "target": TARGET,
        "target_resolved_by_wall_clock": resolved,
        "verdict": verdict,
    }


def ablation_fields(stats: dict[str, Any], modes: tuple[str, ...]) -> dict[str, Any]:
    return {m: {"what": ABLATIONS[m], "ratio_ci95": _est(stats[f"{m}_ratio"], 4),
                "ratio_paired": _est(stats[f"{m}_ratio_paired"], 4),
                "median_step_ms": round(stats["median_step_ms"][m], 3)}
            for m in modes if m in ABLATIONS}


def run_blocks_then_abba(cfg: WorkloadConfig, abba_steps: int, tmp: Path
                         ) -> tuple[list[dict[str, Any]], float, list[dict[str, Any]]]:
    """The interleaved-blocks job (its ranks' results and wall seconds), then, unless `abba_steps` is 0,
    the same job with none and hook alternating step by step (its ranks' results, else empty)."""
    t0 = time.monotonic()
    run(cfg)
    wall = time.monotonic() - t0
    results = load_results(Path(cfg.out_dir))
    if abba_steps <= 0:
        return results, wall, []
    cfg_abba = replace(cfg, job=f"{cfg.job}-abba", schedule=("none", "hook"), block=1, steps=abba_steps,
                       out_dir=str(tmp / "abba"))
    run(cfg_abba)
    return results, wall, load_results(Path(cfg_abba.out_dir))


def hook_threads_ms_per_hooked_step(results: list[dict[str, Any]], cpu: dict[str, float], warm: int) -> float:
    """The hook's threads' CPU (steplens-*: builder, emitter, export, Kafka client) per step that ran
    hook code, from cpu_per_step's per-step means over all steps after the warm-up round."""
    hooked = sum(1 for m, _ in results[0]["times"][warm:] if m in HOOKED)
    steps_after = max(len(results[0]["times"]) - warm, 1)
    return round(sum(v for k, v in cpu.items() if k.startswith("steplens")) * steps_after / max(hooked, 1), 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: the GPU figure (one rank per GPU, NCCL, GPU_MODEL) -> overhead-gpu.json")
    p.add_argument("--world", type=int, default=None, help="ranks (default 4 on cpu, every GPU on cuda)")
    p.add_argument("--block", type=int, default=None,
                   help="steps per block, the first of each is discarded (default 4 on cpu, 8 on cuda)")
    p.add_argument("--rounds", type=int, default=150,
                   help="rounds of one block per mode, the first is warm-up")
    p.add_argument("--cost-pairs", type=int, default=3000,
                   help="hooked/plain step pairs in the CPU-cost bench (0: skip it)")
    p.add_argument("--modes", default=None,
                   help="modes interleaved in the wall-clock bench; none, hook and profiler are required")
    p.add_argument("--comm-timing", default="reducer", choices=("reducer", "python", "off"),
                   help="how the `hook` mode times DDP's all-reduce (producers/hook/torch.py)")
    p.add_argument("--pack", action=argparse.BooleanOptionalAction, default=True,
                   help="the ranks send packed records (STEPLENS_EMIT_PACK, contract 1.2); default on")
    p.add_argument("--batch", type=int, default=None,
                   help=f"cuda: sequences per step (default {GPU_MODEL['batch']}; larger: a more GPU-bound step)")
    p.add_argument("--abba-steps", type=int, default=None,
                   help="steps of the step-by-step none/hook alternation after the blocks (0: none; default "
                        "4000 on cpu, 2000 on cuda)")
    p.add_argument("--out", type=Path, default=None, help=f"default {OUT} ({OUT_GPU.name} on cuda)")
    a = p.parse_args(argv)
    gpu = a.device == "cuda"
    default_modes = GPU_MODES if gpu else MODES + tuple(ABLATIONS)
    modes = ("none", *(m for m in (a.modes or ",".join(default_modes)).split(",") if m and m != "none"))
    if not set(MODES) <= set(modes) or not set(modes) <= set(MODES) | set(ABLATIONS):
        p.error(f"--modes: need {MODES}, may add {tuple(ABLATIONS)}")
    if gpu:
        return main_gpu(a, modes)
    a.world = a.world or 4
    a.block = a.block or 4
    a.out = a.out or OUT
    a.abba_steps = 4000 if a.abba_steps is None else a.abba_steps
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cost_core = cores[-1] if cores else None
    with LoadSampler() as load:
        with kafka_for_ranks(a.pack) as env:
            with tempfile.TemporaryDirectory() as tmp:
                cfg = WorkloadConfig(job=f"bench-overhead-{int(time.time())}", world=a.world,
                                     steps=a.block * len(modes) * a.rounds, schedule=modes, block=a.block,
                                     comm_timing=a.comm_timing,
                                     follow_control=False, out_dir=str(Path(tmp) / "out"), env=env, pin=True)
                results, wall, abba = run_blocks_then_abba(cfg, a.abba_steps, Path(tmp))
            side: dict[str, list[dict[str, Any]]] = {}
            if a.cost_pairs > 0:  # packed vs unpacked helper threads, same broker, paced at the job's step
                step_ms = statistics.median(ms for r in results for m, ms in r["times"] if m == "none")
                # relay: the ranks send to a node relay process (producers/relay) instead of each running
                # a Kafka client; 1 rank, and the job's world of ranks sharing the relay as on a node
                variants = ((True, None, 1, False), (False, None, 1, False), (True, 1.0, 1, False),
                            (True, None, 1, True), (True, None, a.world, True))
                for packed, interval, n_ranks, relay in variants * 2:
                    d = helpers_cost(packed, env, step_ms, cost_core, interval, relay=relay, ranks=n_ranks)
                    name = ("relay" if relay else "packed" if packed else "unpacked") \
                        + ("" if interval is None else "_send_every_1s") + (f"_{n_ranks}_ranks" if n_ranks > 1 else "")
                    side.setdefault(name, []).append(d)
        stats = analyse(job_step_times(results), a.block, modes)
        print_modes(stats, modes)
        cpu = cpu_per_step(results)
        hook_threads = hook_threads_ms_per_hooked_step(results, cpu, a.block * len(modes))
        print(f"CPU per step and rank after round 0, ms (steps of all modes): {cpu}; the hook's threads "
              f"(builder, emitter, Kafka client) per step run with hook code: {hook_threads} ms")
        abba_doc = abba_fields(abba, a.abba_steps, gpu=False)
        if a.cost_pairs <= 0:
            print("cost bench skipped (--cost-pairs 0): nothing written")
            return 0
        t1 = time.monotonic()
        cost = hook_cost(a.cost_pairs, None, cost_core, a.comm_timing)
        rest = hook_cost(a.cost_pairs // 2, "steps,optimizer,forward,autograd,loader,gc", cost_core)
        py = cost if a.comm_timing == "python" else hook_cost(a.cost_pairs // 2, None, cost_core, "python")
        cost_wall = time.monotonic() - t1

    dropped = sum(sum((r["emitter_dropped"] or {}).values()) for r in results)
    in_job = [r["us_per_event"] for r in results if r["us_per_event"] is not None]
    thread = cost["thread_us_per_step"]
    thread_est = Estimate(thread["value"], thread["lo"], thread["hi"])
    cost_r = cost_ratio(thread_est, stats["none_step_ms"])
    helper_us = hook_threads * 1000
    total_est = Estimate(thread_est.value + helper_us, thread_est.lo + helper_us, thread_est.hi + helper_us)
    total_r = cost_ratio(total_est, stats["none_step_ms"])
    hook_r: Estimate = stats["hook_ratio"]
    resolved, verdict = wall_clock_verdict(
        hook_r, f"the cost-based ratio is {cost_r.value:.5f} [{cost_r.lo:.5f}, {cost_r.hi:.5f}] (training thread), "
                f"{total_r.value:.5f} with the helper threads' CPU"
                + (f"; step-by-step ABBA: {abba_doc['abba_verdict']}" if abba_doc else ""))
    doc = {
        **wall_clock_fields(stats, resolved, verdict),
        **abba_doc,
        "us_per_event": cost["us_per_event"],
        "us_per_event_method": "training-thread CPU time the hook adds per step / events per step; " + cost["method"],
        "training_thread_us_per_step": thread,
        "comm_timing": a.comm_timing,
        "comm_timing_us_per_step": {
            "reducer": round(cost["thread_us_per_step"]["value"] - rest["thread_us_per_step"]["value"], 2)
            if a.comm_timing == "reducer" else None,
            "python": round(py["thread_us_per_step"]["value"] - rest["thread_us_per_step"]["value"], 2)},
        "all_but_comm_timing_us_per_step": rest["thread_us_per_step"],
        "all_with_python_comm_hook_us_per_step": py["thread_us_per_step"],
        "breakdown_method": "the same bench with every hook but the DDP all-reduce timing; a timing's cost = "
                            "all hooks with it minus all but it (medians of separate runs: no interval)",
        "ablations": ablation_fields(stats, modes),
        "helper_threads_cpu_us_per_step": cost["helper_threads_cpu_us_per_step"],
        "events_per_step": cost["events_per_step"],
        "cost_bench": {k: cost[k] for k in ("pairs", "model", "unhooked_step_thread_us", "wall_us_per_step",
                                             "inside_entry_points_us_per_step", "errors")},
        "hook_cost_ratio": _est(cost_r, 6),
        "hook_cost_ratio_method": "COST-BASED, not measured wall clock: 1 + training_thread_us_per_step / median "
                                  "step without hook (interval from both intervals' ends)",
        "hook_total_cost_ratio": _est(total_r, 6),
        "hook_total_cost_ratio_method": "COST-BASED, incl. helper threads: 1 + (training_thread_us_per_step + "
                                        "hook_threads_cpu_ms_per_hooked_step, from the real job with Kafka) / "
                                        "median step without hook; the interval carries only the training "
                                        "thread's and the step's (the helper CPU is one total per run)",
        "us_per_event_in_job": round(statistics.median(in_job), 2) if in_job else None,
        "us_per_event_in_job_method": "perf_counter time inside the core hook's entry points per event, in the "
                                      "workload (includes preemption by the other ranks and GIL waits)",
        "steps": cfg.steps,
        "steps_per_mode": stats["steps_per_mode"],
        "median_step_ms": {m: round(v, 3) for m, v in stats["median_step_ms"].items()},
        "rounds": stats["rounds"],
        "block": a.block,
        "world": a.world,
        "pinned": "rank r on core r mod cores; cost bench on the last core",
        "load_average": load.summary(),
        "rank_cpu_ms_per_step": cpu,
        "hook_threads_cpu_ms_per_hooked_step": hook_threads,
        "packed": a.pack,
        "helper_threads_packed_vs_unpacked": {
            k: {"helper_threads_cpu_us_per_step": round(statistics.median(
                    d["helper_threads_cpu_us_per_step"] for d in runs), 2),
                "runs_us_per_step": [d["helper_threads_cpu_us_per_step"] for d in runs],
                "per_thread_cpu_us_per_step": runs[0]["per_thread_cpu_us_per_step"],
                "records_per_step": runs[0]["records_per_step"], "events_per_step": runs[0]["events_per_step"],
                "send_interval_s": runs[0]["send_interval_s"],
                "ranks": runs[0].get("ranks", 1),
                **({"relay_us_per_rank_step": round(statistics.median(d["relay_us_per_rank_step"] for d in runs), 2),
                    "relay_runs_us_per_rank_step": [d["relay_us_per_rank_step"] for d in runs]}
                   if runs[0].get("relay") else {}),
                "hook_total_cost_ratio": round(1 + (thread_est.value + statistics.median(
                    d["helper_threads_cpu_us_per_step"] for d in runs)) / (stats["none_step_ms"].value * 1000), 6)}
            for k, runs in side.items()},
        **relay_summary(side, thread_est.value, stats["none_step_ms"].value * 1000, a.world),
        "helper_threads_packed_vs_unpacked_method": "bench/hook_cost.py --helpers: one process with a RankHook "
            "sending to the same broker, packed, unpacked and packed sending every 1 s in turn (2 runs each, median), "
            "and packed through a node relay process (python -m producers.relay) with 1 rank and with the job's "
            "world of ranks (hooks in one process, each its own emitter and connection) sharing it; per rank-step, "
            "400 steps paced at "
            "the job's median step without hook, each helper thread's CPU from /proc; hook_total_cost_ratio here = "
            "1 + (training_thread_us_per_step + that) / median step without hook",
        "rank_cpu_method": "per rank, CPU seconds of each Python thread (by name, from /proc) and of the whole "
                           "process (process_s, gloo's threads too) over the run / all steps of every mode; mean "
                           "over ranks",
        "events_dropped": dropped,
        "events_sent": sum(r["hook"]["events"] for r in results if r["hook"]),
        "hook_errors": sum(r["hook"]["errors"] for r in results if r["hook"]),
        "device": "cpu (gloo, loopback; no accelerator lent to this task)",
        "workload": "tiny transformer LM (2 layers, d=64, seq 32, batch 8), PyTorch DDP, torch "
                    + __import__("torch").__version__,
        "wall_s": round(wall, 1),
        "cost_bench_wall_s": round(cost_wall, 1),
        "machine": machine(),
        "started": started_at,
        "git": git_commit(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    print(f"training thread: {thread['value']} us/step [{thread['lo']}, {thread['hi']}] "
          f"(all-reduce timing {doc['comm_timing_us_per_step']}, all but it {rest['thread_us_per_step']['value']}), "
          f"us_per_event {doc['us_per_event']}; "
          f"cost-based ratio {cost_r.value:.5f} [{cost_r.lo:.5f}, {cost_r.hi:.5f}]")
    print(f"cost-based ratio incl. the hook's helper threads ({hook_threads} ms CPU per hooked step in the job): "
          f"{total_r.value:.5f} [{total_r.lo:.5f}, {total_r.hi:.5f}]")
    for k, v in doc["helper_threads_packed_vs_unpacked"].items():
        print(f"helper threads {k}: {v['helper_threads_cpu_us_per_step']} us/step (runs {v['runs_us_per_step']}), "
              f"{v['records_per_step']} records/step, cost-based total ratio {v['hook_total_cost_ratio']}")
    if "hook_total_cost_ratio_relay" in doc:
        print(f"through the node relay ({a.world} ranks): rank helper threads "
              f"{doc['helper_threads_relay_us_per_step']} "
              f"us/step (direct packed {doc['helper_threads_direct_us_per_step']}), relay process "
              f"{doc['relay_us_per_rank_step']} us per rank-step on the node's spare cores; cost-based total ratio "
              f"{doc['hook_total_cost_ratio_relay']} ({doc['hook_total_cost_ratio_relay_incl_relay']} if the relay's "
              f"CPU were taken from training too)")
    print(f"{verdict}; load average {doc['load_average']}; dropped {dropped}")
    print(f"wrote {a.out}")
    return 0


def abba_quads(times: list[tuple[str, float]], warm_steps: int) -> tuple[list[list[float]], list[list[float]]]:
    """Step-by-step alternation (block 1 over ("none", "hook"): none, hook, hook, none, none, hook, ...):
    per quad of steps after `warm_steps`, its two hook steps and its two none steps. Adjacent steps
    share the machine's state (clocks, temperature, background), so a quad's ratio cancels drift
    that blocks of several steps do not."""
    hook_q: list[list[float]] = []
    none_q: list[list[float]] = []
    start = -(-warm_steps // 4) * 4
    for i in range(start, len(times) - 3, 4):
        quad = times[i:i + 4]
        h = [ms for m, ms in quad if m == "hook"]
        n = [ms for m, ms in quad if m == "none"]
        if len(h) == 2 and len(n) == 2:
            hook_q.append(h)
            none_q.append(n)
    return hook_q, none_q


def abba_steady_ratios(times: list[tuple[str, float]], warm_steps: int) -> list[float]:
    """The ABBA run's steps that follow a step of their own mode (no mode switch just before them):
    in none, hook, hook, none, none, ... each second hook step over the mean of the second none steps
    on either side of it (two steps away each). Drops what a switch leaves in the step after it."""
    out: list[float] = []
    start = -(-warm_steps // 4) * 4
    for i in range(start, len(times) - 4, 4):
        seq = [m for m, _ in times[i:i + 5]]
        if seq == ["none", "hook", "hook", "none", "none"]:
            out.append(times[i + 2][1] / ((times[i][1] + times[i + 4][1]) / 2))
    return out


def abba_fields(abba: list[dict[str, Any]], steps: int, *, gpu: bool) -> dict[str, Any]:
    """The step-by-step ABBA run's result keys (empty without one), printed as they are computed."""
    if not abba:
        return {}
    abba_times = job_step_times(abba)
    hook_q, none_q = abba_quads(abba_times, ABBA_WARM_STEPS)
    paired = paired_ratio_ci(hook_q, none_q, seed=17)
    pooled = ratio_of_medians_ci(hook_q, none_q, seed=19)
    steady = median_ci(abba_steady_ratios(abba_times, ABBA_WARM_STEPS), seed=23)
    _, verdict = wall_clock_verdict(paired, "")
    doc: dict[str, Any] = {
        "hook_ratio_abba": _est(paired, 5), "hook_ratio_abba_pooled": _est(pooled, 5),
        "hook_ratio_abba_steady": _est(steady, 5),
        "abba_verdict": verdict.rstrip("; "),
        **({"abba_host_share_of_step": host_share_of_step(abba, ABBA_WARM_STEPS)} if gpu else {}),
        "abba_quads": len(hook_q), "abba_steps": steps,
        "abba_median_step_ms": {"none": round(statistics.median(x for q in none_q for x in q), 3),
                                "hook": round(statistics.median(x for q in hook_q for x in q), 3)},
        "abba_method": f"a second run of the same job alternating none and hook step by step (block 1: "
                       f"none, hook, hook, none, ...; the first {ABBA_WARM_STEPS} steps dropped); per "
                       f"quad of steps, mean of its two hook steps / mean of its two none steps; "
                       f"hook_ratio_abba = median over quads with a 95 % bootstrap interval (quads "
                       f"resampled); _pooled = median of all hook steps / median of all none steps; "
                       f"_steady = median over quads of (the hook step that follows a hook step / "
                       f"the mean of the none steps two steps before and after it, each following "
                       f"a none step), which leaves out the steps right after a mode switch"}
    print(f"step-by-step ABBA ({len(hook_q)} quads): hook/none {paired.value:.5f} [{paired.lo:.5f}, "
          f"{paired.hi:.5f}], pooled medians {pooled.value:.5f} [{pooled.lo:.5f}, {pooled.hi:.5f}], "
          f"steady steps {steady.value:.5f} [{steady.lo:.5f}, {steady.hi:.5f}]"
          + (f"; host share {doc['abba_host_share_of_step']}" if gpu else ""))
    return doc


def host_share_of_step(results: list[dict[str, Any]], warm: int) -> dict[str, float]:
    """Median over steps after the warm-up round of (host part / step time), per mode, over all ranks."""
    by_mode: dict[str, list[float]] = {}
    for r in results:
        for (mode, ms), enq in list(zip(r["times"], r["enqueued_ms"], strict=True))[warm:]:
            by_mode.setdefault(mode, []).append(enq / ms)
    return {m: round(statistics.median(v), 3) for m, v in by_mode.items()}


def gpu_device() -> str:
    """What the GPU figure ran on: the GPU's name and count, its driver, and torch's CUDA."""
    import torch

    n = torch.cuda.device_count()
    driver = "unknown"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.split()[0]
    return (f"{n}x {torch.cuda.get_device_name(0)} (driver {driver}, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, NCCL)")


def main_gpu(a: argparse.Namespace, modes: tuple[str, ...]) -> int:
    """The GPU figure: the interleaved wall-clock bench of the DDP workload on CUDA (module docstring)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench-overhead --device cuda: torch sees no CUDA device")
    world = a.world or torch.cuda.device_count()
    a.abba_steps = 2000 if a.abba_steps is None else a.abba_steps
    block = a.block or 8
    out = a.out or OUT_GPU
    series = out.with_suffix(".steps.json")  # every step's mode, time and host part, for a second look
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    model = {**GPU_MODEL, "batch": a.batch or GPU_MODEL["batch"]}
    with LoadSampler() as load, kafka_for_ranks(a.pack) as env, tempfile.TemporaryDirectory() as tmp:
        cfg = WorkloadConfig(job=f"bench-overhead-gpu-{int(time.time())}", world=world,
                             steps=block * len(modes) * a.rounds, schedule=modes, block=block,
                             comm_timing=a.comm_timing, follow_control=False, out_dir=str(Path(tmp) / "out"),
                             env=env, device="cuda", batch=model["batch"], seq=model["seq"],
                             vocab=model["vocab"], hidden=model["hidden"], heads=model["heads"],
                             layers=model["layers"], ffn=model["ffn"])
        results, wall, abba = run_blocks_then_abba(cfg, a.abba_steps, Path(tmp))
    stats = analyse(job_step_times(results), block, modes)
    print_modes(stats, modes)
    cpu = cpu_per_step(results)
    hook_threads = hook_threads_ms_per_hooked_step(results, cpu, block * len(modes))
    host_share = host_share_of_step(results, block * len(modes))
    print(f"host part of a step (launches queued, before the sync) / step, median per mode: {host_share}")
    in_job = [r["us_per_event"] for r in results if r["us_per_event"] is not None]
    us_per_event = round(statistics.median(in_job), 2) if in_job else None
    extra = f"the hook's threads used {hook_threads} ms CPU per hooked step on the machine's other cores"
    abba_doc = abba_fields(abba, a.abba_steps, gpu=True)
    if abba_doc:
        extra += f"; step-by-step ABBA: {abba_doc['abba_verdict']}"
    hook_r: Estimate = stats["hook_ratio"]
    resolved, verdict = wall_clock_verdict(hook_r, extra)
    doc = {
        **wall_clock_fields(stats, resolved, verdict),
        "us_per_event": us_per_event,
        "us_per_event_method": "perf_counter time inside the core hook's entry points per event on the training "
                               "thread, in this job (median over ranks; includes GIL waits on the hook's threads)",
        "ablations": ablation_fields(stats, modes),
        **abba_doc,
        "steps": cfg.steps,
        "steps_per_mode": stats["steps_per_mode"],
        "median_step_ms": {m: round(v, 3) for m, v in stats["median_step_ms"].items()},
        "rounds": stats["rounds"],
        "block": block,
        "world": world,
        "comm_timing": a.comm_timing,
        "pinned": "no: the ranks and the hook's threads are free on the machine's cores",
        "step_end": "torch.cuda.synchronize() after optimizer.step() in every mode, before the hook's step_end",
        "host_share_of_step": host_share,
        "host_share_method": "per step, the time from its start until optimizer.step() returned (every kernel "
                             "queued, before the sync) / the step's time; median per mode after round 0. Near 1: "
                             "the host (Python, launches) paces the step and host-side cost shows in it; well "
                             "below 1: the GPU does, and the host's work hides behind it",
        "series": series.name,
        "load_average": load.summary(),
        "rank_cpu_ms_per_step": cpu,
        "hook_threads_cpu_ms_per_hooked_step": hook_threads,
        "packed": a.pack,
        "events_dropped": sum(sum((r["emitter_dropped"] or {}).values()) for r in results),
        "events_sent": sum(r["hook"]["events"] for r in results if r["hook"]),
        "hook_errors": sum(r["hook"]["errors"] for r in results if r["hook"]),
        "device": gpu_device(),
        "workload": f"GPT-style transformer LM ({model}), bf16 autocast, PyTorch DDP, AdamW, torch "
                    + torch.__version__,
        "wall_s": round(wall, 1),
        "machine": machine(),
        "started": started_at,
        "git": git_commit(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    series.write_bytes(orjson.dumps({"block": block, "modes": modes, "ranks": [
        {"rank": r["rank"], "times": r["times"], "enqueued_ms": r["enqueued_ms"]} for r in results],
        "abba_ranks": [{"rank": r["rank"], "times": r["times"], "enqueued_ms": r["enqueued_ms"]} for r in abba]}))
    print(f"{verdict}; us_per_event {us_per_event} (in job); load average {doc['load_average']}; "
          f"dropped {doc['events_dropped']}; device {doc['device']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
