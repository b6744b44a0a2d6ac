"""What the rank hook costs the training thread per step, measured differentially.

One process pinned to one core trains a small real model (DDP over gloo with world size 1, so
the comm hook runs; AdamW; a batch iterator wrapped by the hook) for thousands of steps, in short
blocks alternating *hook attached* and *hook detached* (ABBA order, so warming and drift hit both
alike). Per block it reads the training thread's CPU clock (`time.thread_time_ns`), the
process's CPU clock (all threads: the hook's builder and the emitter's threads too) and the wall
clock. The cost is the median over block pairs of (attached - detached) per step, with a
bootstrap interval: it includes everything the hook adds to the training thread (step calls,
forward/optimizer/autograd wrappers, the DDP all-reduce timing, GC callbacks, the data-iterator wrapper,
the hand-over to the builder thread), torch's own slower paths for hooked modules included.

Run: `python -m bench.hook_cost` (prints JSON); bench/overhead.py runs it in a subprocess.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import cycle
from typing import Any

import orjson

from bench.stats import Estimate, median_ci

PARTS = ("steps", "comm", "optimizer", "forward", "autograd", "loader", "gc")


def measure(*, pairs: int = 10_000, warmup_pairs: int = 200, width: int = 32, core: int | None = None,
            parts: tuple[str, ...] = PARTS, comm_timing: str = "reducer") -> dict[str, Any]:
    """Alternate hooked and plain steps (ABBA) and return per-step costs (µs) with 95 % intervals.

    `parts` leaves pieces of the instrumentation out (for a per-piece breakdown); `comm_timing`
    is how the `comm` part times DDP's all-reduce (its `reducer` default reads in the patched
    autograd, so measure it as all parts minus all but `comm`).
    """
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    import gc

    import torch
    import torch.distributed as dist
    from torch import nn

    from producers.emitter import BackgroundEmitter
    from producers.exporter import InMemoryExporter
    from producers.hook.core import RankHook, RankInfo
    from producers.hook.torch import TorchInstrumentation
    from schemas import Domain

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]

    def ddp() -> tuple[Any, Any]:
        torch.manual_seed(0)
        m = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)))
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    # Two identical replicas: the hooked one carries every hook (DDP takes one comm hook for its
    # lifetime, so the plain one keeps DDP's built-in C++ all-reduce); steps alternate between them.
    (m_on, opt_on), (m_off, opt_off) = ddp(), ddp()
    batches = [torch.randn(8, width) for _ in range(16)]
    loss_fn = nn.MSELoss()
    exporter = InMemoryExporter()
    total = 2 * (pairs + warmup_pairs)
    hook = RankHook(RankInfo("bench-cost", 0, 1, "h", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    lambda: BackgroundEmitter(exporter, max_queue=4 * total, spool_dir=None))
    hook.open()
    orig_backward = torch.autograd.backward  # plain steps bypass the patched autograd entry point
    inst = TorchInstrumentation(hook)
    if "comm" in parts:
        inst.attach_ddp(m_on, timing=comm_timing)
    if "optimizer" in parts:
        inst.attach_optimizer(opt_on, auto_steps=False)
    if "forward" in parts:
        inst.attach_model(m_on.module, forward_hooks=False)
    if "autograd" in parts:
        inst.patch_autograd()
    gc_cb = gc.callbacks[-1]  # the hook's GC callback, present only during hooked steps
    gc.callbacks.remove(gc_cb)
    gc_on = [gc_cb] if "gc" in parts else []
    plain = cycle(batches)
    wrapped = hook.wrap_loader(cycle(batches)) if "loader" in parts else cycle(batches)
    with_steps = "steps" in parts
    clocks = (time.thread_time_ns, time.perf_counter_ns)

    def hooked() -> tuple[int, int]:
        gc.callbacks.extend(gc_on)
        t_thr, t_wall = clocks[0](), clocks[1]()
        if with_steps:
            hook.step_begin()
        x = next(wrapped)
        loss = loss_fn(m_on(x), x)
        opt_on.zero_grad(set_to_none=True)
        loss.backward()
        opt_on.step()
        if with_steps:
            hook.step_end(samples=8, tokens=8 * width, batch_size=8, flops=1e6)
        res = clocks[0]() - t_thr, clocks[1]() - t_wall
        if gc_on:
            gc.callbacks.remove(gc_cb)
        return res

    def unhooked() -> tuple[int, int]:
        t_thr, t_wall = clocks[0](), clocks[1]()
        x = next(plain)
        loss = loss_fn(m_off(x), x)
        opt_off.zero_grad(set_to_none=True)
        orig_backward(loss)
        opt_off.step()
        return clocks[0]() - t_thr, clocks[1]() - t_wall

    d_thr: list[float] = []
    d_wall: list[float] = []
    base: list[float] = []
    cpu0 = time.process_time_ns()
    thr0 = time.thread_time_ns()
    for i in range(warmup_pairs + pairs):
        if i % 2 == 0:
            on, off = hooked(), unhooked()
        else:
            off, on = unhooked(), hooked()
        if i >= warmup_pairs:
            d_thr.append((on[0] - off[0]) / 1e3)
            d_wall.append((on[1] - off[1]) / 1e3)
            base.append(off[0] / 1e3)
    hook.flush(60.0)
    helper_us = ((time.process_time_ns() - cpu0) - (time.thread_time_ns() - thr0)) / 1e3 / (pairs + warmup_pairs)
    stats = hook.stats()
    inst.remove()
    gc.callbacks.append(gc_cb)
    hook.close(30.0)
    dist.destroy_process_group()
    thread = median_ci(d_thr, seed=1)
    events_per_step = stats.events / stats.steps if stats.steps else 0.0
    return {
        "thread_us_per_step": _est(thread),
        "wall_us_per_step": _est(median_ci(d_wall, seed=2)),
        "helper_threads_cpu_us_per_step": round(helper_us, 2),
        "unhooked_step_thread_us": round(float(sorted(base)[len(base) // 2]), 1),
        "events_per_step": round(events_per_step, 3),
        "us_per_event": round(thread.value / events_per_step, 2) if events_per_step else None,
        "inside_entry_points_us_per_step": round(stats.overhead_ns / 1e3 / max(stats.steps, 1), 2),
        "errors": stats.errors,
        "pairs": pairs,
        "parts": list(parts),
        "comm_timing": comm_timing,
        "forward_phase": "from batch ready to backward start (attach_model(forward_hooks=False))",
        "model": f"DDP(gloo, world 1) Linear({width},{width})-ReLU-Linear, AdamW, batch 8, CPU",
        "method": "hooked and plain steps alternate (ABBA) on two identical DDP replicas; per pair of adjacent "
                  "steps the difference of training-thread CPU time (time.thread_time_ns); median over pairs "
                  "with a 95 % bootstrap interval; one process pinned to one core. Hooked steps carry every "
                  "hook: step calls, forward/optimizer hooks, patched autograd, the DDP all-reduce timing (reducer "
                  "timestamps read after backward, or the opt-in Python comm hook; plain: DDP's built-in all-reduce "
                  "and no timing), the wrapped batch iterator, the GC callback",
    }


def _process_cpu_ns(pid: int) -> int:
    """CPU ns of every thread of process `pid` so far (schedstat: ns, finer than /proc/<pid>/stat's ticks)."""
    from pathlib import Path

    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total


def helper_threads(settings: Any, *, pack: bool, steps: int = 400, step_ms: float = 42.5,
                   warmup_steps: int = 40, interval_s: float | None = None, relay: bool = False,
                   ranks: int = 1) -> dict[str, Any]:
    """The hook's helper-thread CPU per step with a real Kafka, packed or not (no model: the
    training loop only calls the hook, one step every `step_ms`, paced on the clock).

    Each thread's CPU from /proc (schedstat) over `steps` steps after a warm-up and a flush; the
    send cadence is Settings.hook_flush_interval_s as in a real rank. What the builder, the
    emitter's worker and export threads and kafka-python's network thread cost per step.

    `relay`: the hooks send to a node relay (`python -m producers.relay`, its own process, as on a
    node) instead of Kafka; `ranks` hooks in this process share it (each its own emitter and
    connection). Reported per rank-step: the ranks' helper threads, and separately the relay
    process's CPU (all its threads), which a node runs on its spare cores.
    """
    import subprocess
    import tempfile
    import threading
    from dataclasses import replace
    from pathlib import Path

    from producers.hook import kafka_emitter_factory
    from producers.hook.core import RankHook, RankInfo
    from producers.workloads.ddp_transformer import threads_cpu_s
    from schemas import Domain, Topics

    s = replace(settings, emit_pack=pack, hook_flush_interval_s=interval_s or settings.hook_flush_interval_s)
    tmp = tempfile.TemporaryDirectory(prefix="slr")
    relay_proc: subprocess.Popen[str] | None = None
    if relay:
        s = replace(s, relay_socket=str(Path(tmp.name) / "relay.sock"))
        env = {**os.environ, "STEPLENS_RELAY_SOCKET": s.relay_socket, "STEPLENS_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
               "STEPLENS_TOPIC_PREFIX": s.topic_prefix}
        relay_proc = subprocess.Popen([sys.executable, "-m", "producers.relay"], env=env, stderr=subprocess.PIPE,
                                      text=True, cwd=Path(__file__).resolve().parent.parent)
        assert relay_proc.stderr is not None and "listening" in relay_proc.stderr.readline()
    mode = "relay" if relay else "packed" if pack else "unpacked"
    job = f"bench-helper-{mode}-{os.getpid()}"
    hooks = [RankHook(RankInfo(job, r, ranks, "bench-host", r, {"dp": Domain(group=0, size=ranks, index=r)}),
                      kafka_emitter_factory(s, Topics(s.topic_prefix), spool_dir=None,
                                            flush_interval_s=s.hook_flush_interval_s),
                      build_interval_s=s.hook_flush_interval_s)
             for r in range(ranks)]
    emitters: list[Any] = [h.open() for h in hooks]
    pace = threading.Event()  # never set: a clock-paced wait, as a training step would take
    period = step_ms / 1e3

    def run_steps(n: int) -> None:
        next_at = time.monotonic()
        for _ in range(n):
            for hook in hooks:
                hook.step_begin()
                hook.add_phase_ms("forward", 10.0)
                hook.add_phase_ms("backward", 20.0)
                hook.record_collective("allreduce", 5_000_000, nbytes=1 << 20, domain="dp", group_size=4)
                hook.step_end(samples=8, tokens=256, batch_size=8, flops=1e9)
            next_at += period
            pace.wait(max(next_at - time.monotonic(), 0.0))

    def sent() -> tuple[int, int]:
        st = [e.stats() for e in emitters]
        return sum(x.records_sent for x in st), sum(x.exported for x in st)

    try:
        run_steps(warmup_steps)
        for h in hooks:
            h.flush(60.0)
        if relay_proc is not None:
            # the relay builds its Kafka producer (TLS + SASL/SCRAM handshake, ~0.1 s of CPU) on its first
            # export, after its flush interval: let that happen before the window, as warm-up does for a rank
            pace.wait(s.relay_flush_interval_s + 2.0)
        before, (sent0, ev0) = threads_cpu_s(), sent()
        relay0 = _process_cpu_ns(relay_proc.pid) if relay_proc else 0
        t0 = time.monotonic()
        run_steps(steps)
        for h in hooks:
            h.flush(60.0)
        wall = time.monotonic() - t0
        after, (sent1, ev1) = threads_cpu_s(), sent()
        # with durable acks (the default) the ranks' flush returned once the relay had the records in Kafka
        # or its spool; with STEPLENS_RELAY_DURABLE_ACK=0 its send follows within its flush interval
        # (STEPLENS_RELAY_FLUSH_INTERVAL_S, 0.2 s) plus one export: either way count that CPU in the window
        pace.wait(0.5)
        relay_ns = _process_cpu_ns(relay_proc.pid) - relay0 if relay_proc else 0
        dropped: dict[str, int] = {}
        for e in emitters:
            for k, v in e.stats().dropped.items():
                dropped[k] = dropped.get(k, 0) + v
    finally:
        for h in hooks:
            h.close(30.0)
        relay_err = ""
        if relay_proc is not None:
            relay_proc.terminate()
            relay_err = relay_proc.communicate(timeout=60)[1].strip().splitlines()[-1]
        tmp.cleanup()
    rank_steps = steps * ranks
    per_thread = {n: round((after.get(n, 0.0) - before.get(n, 0.0)) * 1e6 / rank_steps, 2)
                  for n in sorted(after) if n != "MainThread"}
    doc: dict[str, Any] = {
        "pack": pack,
        "relay": relay,
        "ranks": ranks,
        "helper_threads_cpu_us_per_step": round(sum(per_thread.values()), 2),
        "per_thread_cpu_us_per_step": per_thread,
        "records_per_step": round((sent1 - sent0) / rank_steps, 3),
        "events_per_step": round((ev1 - ev0) / rank_steps, 3),
        "dropped": dropped,
        "steps": steps,
        "step_ms": step_ms,
        "send_interval_s": s.hook_flush_interval_s,
        "wall_s": round(wall, 1),
    }
    if relay:
        doc["relay_us_per_rank_step"] = round(relay_ns / 1e3 / rank_steps, 2)
        doc["relay_summary"] = relay_err
    return doc


def _est(e: Estimate) -> dict[str, float]:
    return e.rounded(2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hook_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=10_000)
    p.add_argument("--core", type=int, default=None, help="pin to this CPU core")
    p.add_argument("--parts", default=",".join(PARTS), help="instrumentation pieces on hooked steps")
    p.add_argument("--comm-timing", default="reducer", choices=("reducer", "python", "off"))
    p.add_argument("--helpers", choices=("packed", "unpacked", "relay"), default=None,
                   help="instead: the hook's helper-thread CPU per step against the real Kafka of the STEPLENS_* "
                        "settings, packed or not, or packed through a node relay process (no model)")
    p.add_argument("--ranks", type=int, default=1, help="--helpers: hooks in this process (sharing the relay)")
    p.add_argument("--steps", type=int, default=400, help="--helpers: steps measured")
    p.add_argument("--step-ms", type=float, default=42.5, help="--helpers: step period")
    p.add_argument("--interval", type=float, default=None,
                   help="--helpers: send interval (default: STEPLENS_HOOK_FLUSH_INTERVAL_S)")
    a = p.parse_args(argv)
    if a.helpers is not None:
        if a.core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {a.core})
        from infra.settings import load_settings

        doc = helper_threads(load_settings(), pack=a.helpers != "unpacked", steps=a.steps, step_ms=a.step_ms,
                             interval_s=a.interval, relay=a.helpers == "relay", ranks=a.ranks)
        sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
        return 0
    parts = tuple(x for x in a.parts.split(",") if x)
    doc = measure(pairs=a.pairs, core=a.core, parts=parts, comm_timing=a.comm_timing)
    sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
