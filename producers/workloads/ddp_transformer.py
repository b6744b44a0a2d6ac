"""A real training job: a transformer LM trained with PyTorch DDP, N ranks on loopback.

On CPU (the default) a tiny model with gloo; with `device="cuda"` (the GPU overhead figure) one
rank per GPU with NCCL, bf16 autocast, and a sync at the end of every step in every mode (what a
loop that logs its loss does), so a step's time is the GPU's.

Instrumented with the rank hook and sending to the real Kafka, with injectable real slowdowns
on one rank:
- `hog`: competing busy-loop processes pinned to the rank's core (the rank is pinned alone to
  the last core, the other ranks to the remaining cores, so only it competes with the hogs);
- `gc`: a GC storm (cyclic garbage + full collections inside the step);
- `slow_data`: a data loader that sleeps in `__getitem__`;
- `sleep_allreduce`: a sleep in the DDP comm hook before every gradient all-reduce.

Mode schedule (for the overhead bench): `--schedule none,hook,profiler` runs blocks of
`--block` steps, each round of blocks in a rotated order (ABC, BCA, CAB, ...) inside the same
process group, switching the hook's instrumentation and an always-on torch.profiler on and off
at block boundaries. Modes (MODES):
- `none`: no hook code at all; `profiler`: torch.profiler always on, no hook;
- `hook`: the hook as configured (its comm-timing choice included), sending to Kafka;
- ablations, to find where the hook's wall time goes: `hook_pycomm` the hook with the opt-in
  Python DDP comm hook, `pycomm` that Python comm hook alone (no other hook code), `hook_nosend`
  the hook with its events built and encoded but not sent.
Modes without the Python comm hook train an identical replica with DDP's built-in C++
all-reduce (DDP keeps a comm hook for its lifetime); `pin=True` pins rank r to core r mod cores.

Run: `python -m producers.workloads.ddp_transformer --world 4 --steps 30 --job demo --fault hog --fault-rank 2`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    job: str
    world: int = 4
    steps: int = 30
    batch: int = 8
    seq: int = 32
    vocab: int = 256
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    ffn: int = 128
    fault: str = ""            # hog | gc | slow_data | sleep_allreduce
    fault_rank: int = 2
    fault_from_step: int = 0
    hogs: int = 8
    sleep_ms: float = 30.0
    step_sleep_ms: float = 0.0  # every rank: extra host time per step (stretches a run for outage/control tests)
    schedule: tuple[str, ...] = ("hook",)  # modes per block (MODES)
    comm_timing: str = "reducer"  # how `hook` times DDP's all-reduce (producers.hook.torch.COMM_TIMINGS)
    block: int = 10
    follow_control: bool = True
    pin: bool = False  # pin rank r to core r mod cores (the overhead bench; the hog fault pins its own way)
    device: str = "cpu"  # cpu (gloo) | cuda (nccl, rank r on GPU r)
    out_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)


MODES = ("none", "hook", "profiler", "hook_pycomm", "pycomm", "hook_nosend")
HOOKED = frozenset({"hook", "hook_pycomm", "hook_nosend"})  # modes that run the rank hook's instrumentation


def mode_of(step: int, cfg: WorkloadConfig) -> str:
    """The mode of a step: blocks of cfg.block steps, each round of blocks in a rotated order."""
    blk = step // cfg.block
    n = len(cfg.schedule)
    return cfg.schedule[(blk + blk // n) % n]


def _replica(mode: str, cfg: WorkloadConfig) -> str:
    """Which DDP replica a mode trains: `py` carries the Python timing comm hook, `plain` DDP's C++ all-reduce."""
    if mode in ("hook_pycomm", "pycomm") or (mode in ("hook", "hook_nosend") and cfg.comm_timing == "python"):
        return "py"
    return "plain"


class _SendSwitch:
    """The `hook_nosend` ablation: events of steps in such blocks are encoded (the builder's full work)
    but not handed to Kafka; every other event goes to the real Kafka emitter."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        self.cfg = cfg
        self.held = 0
        self.inner: Any = None

    def factory(self, settings: Any) -> Any:
        from producers.hook import kafka_emitter_factory
        from schemas import Topics

        build = kafka_emitter_factory(settings, Topics(settings.topic_prefix),
                                      flush_interval_s=settings.hook_flush_interval_s)

        def make() -> _SendSwitch:
            self.inner = build()
            return self

        return make

    def emit(self, event: Any) -> bool:
        if self._hold(event):
            return True
        ok: bool = self.inner.emit(event)
        return ok

    def emit_batch(self, events: Any, *, send_now: bool = False) -> int:
        """The builder's round (BackgroundEmitter.emit_batch), less the held events of hook_nosend steps."""
        sent = [e for e in events if not self._hold(e)]
        n: int = self.inner.emit_batch(sent, send_now=send_now) if sent else 0
        return n + len(events) - len(sent)

    def _hold(self, event: Any) -> bool:
        from schemas import encode

        step = getattr(event, "step", None)
        if step is not None and mode_of(step, self.cfg) == "hook_nosend":
            encode(event)
            self.held += 1
            return True
        return False

    def flush(self, timeout: float | None = None) -> bool:
        ok: bool = self.inner.flush(timeout)
        return ok

    def close(self, timeout: float | None = 10.0) -> bool:
        ok: bool = self.inner.close(timeout)
        return ok


def threads_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's Python threads by name (digits dropped), from /proc (schedstat,
    ns): where a rank's CPU goes besides its training thread (the hook's builder, the emitter, the
    Kafka client)."""
    import re
    import threading

    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            ns = int(Path(f"/proc/self/task/{t.native_id}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
        name = re.sub(r"[-_]?\d+", "", t.name) or "thread"
        out[name] = out.get(name, 0.0) + ns / 1e9
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# spins until its parent (the rank) is gone: a rank that dies never leaves a hog burning a core
HOG_LOOP = """import os
parent = os.getppid()
x = 0
while os.getppid() == parent:
    for _ in range(20000):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
"""


def _start_hogs(n: int, core: int | None) -> list[subprocess.Popen[bytes]]:
    """`n` busy-loop processes pinned to `core`, each a fresh interpreter started by exec, not a
    fork of this rank: a fork of a process whose hook threads hold a lock (the emitter's, logging's)
    can leave the child blocked on that lock forever, and a hog that never runs slows nothing.
    Returns once each hog is seen on the CPU."""
    from producers.sampler.procfs import process_cpu_ticks

    procs = [subprocess.Popen([sys.executable, "-S", "-c", HOG_LOOP], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]
    if core is not None:
        for p in procs:
            os.sched_setaffinity(p.pid, {core})
    deadline = time.monotonic() + 30.0
    def started(p: subprocess.Popen[bytes]) -> bool:
        """Its own CPU clock moved (or it is gone: nothing to wait for)."""
        try:
            return p.poll() is not None or process_cpu_ticks(p.pid) > 0
        except OSError:
            return True

    for p in procs:
        while time.monotonic() < deadline and not started(p):
            time.sleep(0.01)
    return procs


def _pin(rank: int, cfg: WorkloadConfig) -> int | None:
    """With the hog fault: the fault rank alone on the last core, the others on the rest."""
    if cfg.fault != "hog" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    core = cores[-1] if rank == cfg.fault_rank else None
    os.sched_setaffinity(0, {core} if core is not None else set(cores[:-1]))
    return cores[-1]


def _rank_main(rank: int, cfg: WorkloadConfig, port: int) -> None:
    os.environ.update(cfg.env)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(cfg.world), "LOCAL_RANK": str(rank)})
    import torch
    import torch.distributed as dist
    from torch import nn

    from infra.settings import load_settings
    from producers.emitter import BackgroundEmitter
    from producers.hook import start as start_hook
    from producers.hook.flops import gpt_train_flops
    from producers.hook.torch import TorchInstrumentation, torch_profiler_factory, torch_rank_info
    from schemas import JobEvent

    torch.set_num_threads(1)
    cuda = cfg.device == "cuda"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    hog_core = _pin(rank, cfg)
    if hog_core is None and cfg.pin and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))  # spread ranks over the cores, one core each: no migrations
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=cfg.world)
    torch.manual_seed(0)

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(cfg.vocab, cfg.hidden)
            layer = nn.TransformerEncoderLayer(cfg.hidden, cfg.heads, cfg.ffn, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
            self.head = nn.Linear(cfg.hidden, cfg.vocab)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.enc(self.emb(x)))
            return out

    fault_here = bool(cfg.fault) and rank == cfg.fault_rank

    class Tokens(torch.utils.data.Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 10**6

        def __getitem__(self, i: int) -> torch.Tensor:
            if fault_here and cfg.fault == "slow_data":
                time.sleep(cfg.sleep_ms / 1000 / cfg.batch)
            g = torch.Generator().manual_seed(i * cfg.world + rank)
            return torch.randint(0, cfg.vocab, (cfg.seq + 1,), generator=g)

    # DDP takes one comm hook for its lifetime: the Python timing comm hook lives on its own replica
    # (`py`), every other mode trains an identical replica (`plain`) with DDP's built-in C++
    # all-reduce, so `none` is a job without any of the hook's code
    replicas: dict[str, tuple[Any, Any]] = {}
    for kind in sorted({_replica(m, cfg) for m in cfg.schedule}):
        torch.manual_seed(0)
        m = nn.parallel.DistributedDataParallel(TinyLM().to(dev), device_ids=[rank] if cuda else None)
        replicas[kind] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=cfg.batch, num_workers=0)
    info = torch_rank_info(cfg.job)
    uses_hook = any(m in HOOKED or m == "pycomm" for m in cfg.schedule)
    sends = _SendSwitch(cfg)
    hook = start_hook(cfg.job, rank=info.rank, world=info.world, device=info.device, host=info.host,
                      domains=info.domains, profiler_factory=torch_profiler_factory,
                      follow_control=cfg.follow_control and uses_hook,
                      emitter_factory=sends.factory(load_settings()) if "hook_nosend" in cfg.schedule else None,
                      ) if uses_hook else None
    inst = TorchInstrumentation(hook) if hook is not None else None
    sleep_s = cfg.sleep_ms / 1000

    def before_launch() -> None:
        if fault_here and cfg.fault == "sleep_allreduce" and step_idx >= cfg.fault_from_step:
            time.sleep(sleep_s)

    if inst is not None and "py" in replicas:
        inst.attach_ddp(replicas["py"][0], before_launch, timing="python")
    if cfg.fault == "sleep_allreduce" and "plain" in replicas:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def plain(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
            before_launch()
            return default_hooks.allreduce_hook(dist.group.WORLD, bucket)  # type: ignore[arg-type]

        replicas["plain"][0].register_comm_hook(None, plain)

    hogs: list[subprocess.Popen[bytes]] = []
    if fault_here and cfg.fault == "hog":
        hogs = _start_hogs(cfg.hogs, hog_core)

    flops = gpt_train_flops(layers=cfg.layers, batch=cfg.batch, seq=cfg.seq, hidden=cfg.hidden, heads=cfg.heads,
                            vocab=cfg.vocab)
    if hook is not None and rank == 0:
        hook.emit(JobEvent(job=cfg.job, phase="start", world=cfg.world, ts_ns=time.time_ns(),
                           parallel={"dp": cfg.world}, model="tiny-transformer", attempt=hook.rank.attempt))
    loss_fn = nn.CrossEntropyLoss()
    times: list[tuple[str, float]] = []
    enqueued: list[float] = []  # cuda: ms from step start until the last kernel was queued (before the sync)
    mode_on = ""
    prof: Any = None
    step_idx = 0
    it = iter(loader)
    warm_steps = min(cfg.block * len(cfg.schedule), cfg.steps - 1)  # the bench discards round 0
    cpu0: dict[str, float] = {}
    timed_it = hook.wrap_loader(it) if hook is not None else it
    autocast: Any = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    try:
        for step_idx in range(cfg.steps):
            if step_idx == warm_steps:
                cpu0 = {"process_s": time.process_time(), **threads_cpu_s()}
            mode = mode_of(step_idx, cfg)
            if mode != mode_on:
                if prof is not None:
                    prof.__exit__(None, None, None)
                    prof = None
                    gc.collect()  # the profiler's garbage must not land in the next block's steps
                if inst is not None:
                    inst.remove()
                m_step, o_step = replicas[_replica(mode, cfg)]
                if mode in HOOKED and inst is not None:
                    inst.attach_optimizer(o_step, auto_steps=False)
                    inst.attach_model(m_step.module, forward_hooks=False)
                    if mode != "hook_pycomm" and cfg.comm_timing != "python":
                        inst.attach_ddp(m_step, timing=cfg.comm_timing)
                    inst.patch_autograd()
                if mode == "profiler":
                    acts = [torch.profiler.ProfilerActivity.CPU]
                    if cuda:
                        acts.append(torch.profiler.ProfilerActivity.CUDA)
                    prof = torch.profiler.profile(activities=acts)
                    prof.__enter__()
                mode_on = mode
            hooked = mode in HOOKED and hook is not None
            t0 = time.perf_counter()
            if hooked:
                assert hook is not None
                hook.step_begin(step_idx)
            batch = next(timed_it if hooked else it)
            if cuda:
                batch = batch.to(dev, non_blocking=True)
            x, y = batch[:, :-1], batch[:, 1:]
            if fault_here and cfg.fault == "gc" and step_idx >= cfg.fault_from_step:
                junk: list[Any] = []
                for _ in range(20000):
                    a: list[Any] = []
                    a.append(a)
                    junk.append(a)
                del junk
                gc.collect()
            if cfg.step_sleep_ms:
                time.sleep(cfg.step_sleep_ms / 1000)
            with autocast:
                out = m_step(x)
                loss = loss_fn(out.reshape(-1, cfg.vocab), y.reshape(-1))
            o_step.zero_grad(set_to_none=True)
            loss.backward()
            o_step.step()
            if cuda:
                enqueued.append((time.perf_counter() - t0) * 1000)  # the host's part: every kernel launched
                torch.cuda.synchronize(dev)
            if hooked:
                assert hook is not None
                hook.step_end(samples=cfg.batch, tokens=cfg.batch * cfg.seq, batch_size=cfg.batch, flops=flops)
            times.append((mode, (time.perf_counter() - t0) * 1000))
        dist.barrier()
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
        for p in hogs:
            p.kill()
        for p in hogs:
            p.wait()
    cpu1 = {"process_s": time.process_time(), **threads_cpu_s()}
    cpu = {k: round(v - cpu0.get(k, 0.0), 3) for k, v in cpu1.items()}  # after the first round of blocks
    stats = None
    dropped: dict[str, int] | None = None
    spooled: int | None = None
    if hook is not None:
        if rank == 0:
            hook.emit(JobEvent(job=cfg.job, phase="end", world=cfg.world, ts_ns=time.time_ns(),
                               parallel={"dp": cfg.world}, last_step=cfg.steps - 1, model="tiny-transformer",
                               attempt=hook.rank.attempt))
        if inst is not None:
            inst.remove()
        hook.flush(60.0)  # the builder counts events as it emits them: read the stats after the flush
        stats = hook.stats()
        em = sends.inner if hook.emitter is sends else hook.emitter
        if isinstance(em, BackgroundEmitter):
            em_stats = em.stats()
            dropped, spooled = em_stats.dropped, em_stats.spooled
        hook.close(30.0)
    if cfg.out_dir:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        Path(cfg.out_dir, f"rank{rank}.json").write_bytes(orjson.dumps({
            "rank": rank, "times": times, "enqueued_ms": enqueued,
            "hook": asdict(stats) if stats is not None else None,
            "us_per_event": stats.us_per_event if stats is not None else None,
            "emitter_dropped": dropped, "emitter_spooled": spooled, "events_held": sends.held, "cpu_s": cpu,
            "cpu_steps": cfg.steps - warm_steps,
        }))
    dist.destroy_process_group()


def run(cfg: WorkloadConfig) -> None:
    """Spawn `cfg.world` ranks and wait for them (raises if one fails)."""
    import torch
    from torch.multiprocessing.spawn import spawn

    if cfg.device == "cuda" and cfg.world > torch.cuda.device_count():
        raise ValueError(f"device=cuda runs one rank per GPU: world {cfg.world} > {torch.cuda.device_count()} GPUs")

    spawn(_rank_main, args=(cfg, _free_port()), nprocs=cfg.world, join=True)  # type: ignore[no-untyped-call]


def load_results(out_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(p.read_bytes()) for p in sorted(out_dir.glob("rank*.json"))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m producers.workloads.ddp_transformer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fault", default="", choices=("", "hog", "gc", "slow_data", "sleep_allreduce"))
    p.add_argument("--fault-rank", type=int, default=2)
    p.add_argument("--fault-from-step", type=int, default=0)
    p.add_argument("--sleep-ms", type=float, default=30.0)
    p.add_argument("--schedule", default="hook", help=f"comma-separated modes per block, of {','.join(MODES)}")
    p.add_argument("--comm-timing", default="reducer", choices=("reducer", "python", "off"),
                   help="how `hook` times DDP's gradient all-reduce (producers/hook/torch.py)")
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--out-dir", default="")
    a = p.parse_args(argv)
    run(WorkloadConfig(job=a.job, world=a.world, steps=a.steps, fault=a.fault, fault_rank=a.fault_rank,
                       fault_from_step=a.fault_from_step, sleep_ms=a.sleep_ms,
                       schedule=tuple(a.schedule.split(",")), block=a.block, out_dir=a.out_dir,
                       comm_timing=a.comm_timing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
