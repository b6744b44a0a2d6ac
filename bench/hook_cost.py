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


def helper_threads(settings: Any, *, pack: bool, steps: int = 400, step_ms: float = 42.5,
                   warmup_steps: int = 40, interval_s: float | None = None) -> dict[str, Any]:
    """The hook's helper-thread CPU per step with a real Kafka, packed or not (no model: the
    training loop only calls the hook, one step every `step_ms`, paced on the clock).

    Each thread's CPU from /proc (schedstat) over `steps` steps after a warm-up and a flush; the
    send cadence is Settings.hook_flush_interval_s as in a real rank. What the builder, the
    emitter's worker and export threads and kafka-python's network thread cost per step.
    """
    import threading
    from dataclasses import replace

    from producers.hook import kafka_emitter_factory
    from producers.hook.core import RankHook, RankInfo
    from producers.workloads.ddp_transformer import threads_cpu_s
    from schemas import Domain, Topics

    s = replace(settings, emit_pack=pack, hook_flush_interval_s=interval_s or settings.hook_flush_interval_s)
    job = f"bench-helper-{'packed' if pack else 'unpacked'}-{os.getpid()}"
    hook = RankHook(RankInfo(job, 0, 1, "bench-host", 0, {"dp": Domain(group=0, size=1, index=0)}),
                    kafka_emitter_factory(s, Topics(s.topic_prefix), spool_dir=None,
                                          flush_interval_s=s.hook_flush_interval_s),
                    build_interval_s=s.hook_flush_interval_s)
    emitter: Any = hook.open()
    pace = threading.Event()  # never set: a clock-paced wait, as a training step would take
    period = step_ms / 1e3

    def run_steps(n: int) -> None:
        next_at = time.monotonic()
        for _ in range(n):
            hook.step_begin()
            hook.add_phase_ms("forward", 10.0)
            hook.add_phase_ms("backward", 20.0)
            hook.record_collective("allreduce", 5_000_000, nbytes=1 << 20, domain="dp", group_size=4)
            hook.step_end(samples=8, tokens=256, batch_size=8, flops=1e9)
            next_at += period
            pace.wait(max(next_at - time.monotonic(), 0.0))

    run_steps(warmup_steps)
    hook.flush(60.0)
    before, sent0, ev0 = threads_cpu_s(), emitter.stats().records_sent, emitter.stats().exported
    t0 = time.monotonic()
    run_steps(steps)
    hook.flush(60.0)
    wall = time.monotonic() - t0
    after, st = threads_cpu_s(), emitter.stats()
    hook.close(30.0)
    per_thread = {n: round((after.get(n, 0.0) - before.get(n, 0.0)) * 1e6 / steps, 2)
                  for n in sorted(after) if n != "MainThread"}
    return {
        "pack": pack,
        "helper_threads_cpu_us_per_step": round(sum(per_thread.values()), 2),
        "per_thread_cpu_us_per_step": per_thread,
        "records_per_step": round((st.records_sent - sent0) / steps, 3),
        "events_per_step": round((st.exported - ev0) / steps, 3),
        "dropped": st.dropped,
        "steps": steps,
        "step_ms": step_ms,
        "send_interval_s": s.hook_flush_interval_s,
        "wall_s": round(wall, 1),
    }


def _est(e: Estimate) -> dict[str, float]:
    return e.rounded(2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hook_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=10_000)
    p.add_argument("--core", type=int, default=None, help="pin to this CPU core")
    p.add_argument("--parts", default=",".join(PARTS), help="instrumentation pieces on hooked steps")
    p.add_argument("--comm-timing", default="reducer", choices=("reducer", "python", "off"))
    p.add_argument("--helpers", choices=("packed", "unpacked"), default=None,
                   help="instead: the hook's helper-thread CPU per step against the real Kafka of the STEPLENS_* "
                        "settings, packed or not (no model)")
    p.add_argument("--steps", type=int, default=400, help="--helpers: steps measured")
    p.add_argument("--step-ms", type=float, default=42.5, help="--helpers: step period")
    p.add_argument("--interval", type=float, default=None,
                   help="--helpers: send interval (default: STEPLENS_HOOK_FLUSH_INTERVAL_S)")
    a = p.parse_args(argv)
    if a.helpers is not None:
        if a.core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {a.core})
        from steplens.config import load_settings

        doc = helper_threads(load_settings(), pack=a.helpers == "packed", steps=a.steps, step_ms=a.step_ms,
                             interval_s=a.interval)
        sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
        return 0
    parts = tuple(x for x in a.parts.split(",") if x)
    doc = measure(pairs=a.pairs, core=a.core, parts=parts, comm_timing=a.comm_timing)
    sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
