"""PyTorch (and torch_npu) integration of the rank hook.

Zero-code-change mode: `instrument(hook, model=..., optimizer=...)` registers an optimizer
step post-hook (a step ends when `optimizer.step()` returns and the next one begins at once),
forward pre/post hooks on the root module (forward phase), and wraps `torch.autograd.backward`
and `torch.autograd.grad` (B4/B5). A DDP model's gradient all-reduce is timed from DDP's own
reducer by default (`comm_timing="reducer"`): the C++ reducer stamps, every iteration, when each
gradient was ready (relative to the end of DDP's forward, which a wrapper around `ddp.forward`
times), and backward returns once the last all-reduce completed; the patched backward reads the
stamps (one list copy) once backward returns (_ReducerTiming). *Exposed*
communication is the time from the last gradient being ready to the end of the all-reduces:
the part of gradient synchronisation no compute hid, i.e. what a rank spends waiting for the
slowest member of its data-parallel group. Nothing of ours runs during backward, so DDP keeps
its built-in C++ all-reduce and backward never waits for the GIL.

`comm_timing="python"` (opt-in) registers a Python DDP comm hook instead that times every
bucket's all-reduce (launch to completion, bytes). It costs about as little training-thread CPU,
but each bucket then needs the GIL three times during backward (the hook, its completion
callback on the gloo/nccl thread, DDP's result parsing); with busy helper threads and ranks
sharing cores those hand-offs made bench-overhead's job 1.29x slower instead of 1.05x (BENCHMARKS.md).

Domains come from torch.distributed: Megatron-style `parallel_state` when it is initialised,
else declared groups (lists of ranks per domain), else DP = the whole world. A group's id is
its lowest global rank, which is unique per domain type.

Ascend: `torch_npu` is imported only when present; profiling then uses `torch_npu.profiler`
and the dump is tagged `ascend_pt`.

Memory (contract 1.5): `instrument` gives the hook the allocator statistics of the device the model is
on (`torch_memory_stats`: `torch.cuda.*` or `torch.npu.*`), so each step event carries the step's peak
allocated and reserved bytes; a CPU model leaves them out. `model_shape_of` reads what a job's `start`
event can say of the model: its parameter count and element size from the module, its layers, widths,
heads, vocabulary and context from a HuggingFace-style config.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import logging
import operator
import os
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from producers.hook.core import RankHook
from producers.hook.identity import RankInfo, launcher_attempt
from producers.hook.memory import AllocatorStats, capacity_of, module_stats
from producers.hook.profiling import ProfileRequest, ProfileResult, dump_bytes
from schemas import Domain, KernelRecord, ModelShape
from schemas.decoding import decode_object
from schemas.kernel import CollectiveOp, KernelCategory
from schemas.profile import ProfileFormat

log = logging.getLogger(__name__)

MAX_PROFILED_KERNELS_PER_STEP = 4000  # keeps one kernels batch well under the 1 MiB event limit
MARKER = "steplens.step#"  # torch renames "ProfilerStep#<n>" ranges to "ProfilerStep*"


def torch_npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except Exception:
        return False
    return True


# --- identity -------------------------------------------------------------------------------------
def _group_domain(ranks: list[int], rank: int) -> Domain:
    ordered = sorted(ranks)
    return Domain(group=ordered[0], size=len(ordered), index=ordered.index(rank))


def megatron_domains(rank: int) -> dict[str, Domain] | None:
    """Domains from Megatron-style `parallel_state`, when importable and initialised."""
    for name in ("megatron.core.parallel_state", "mindspeed.core.parallel_state"):
        try:
            ps: Any = importlib.import_module(name)
        except Exception:
            continue
        try:
            if not ps.model_parallel_is_initialized():
                continue
            groups = {
                "dp": ps.get_data_parallel_group(),
                "tp": ps.get_tensor_model_parallel_group(),
                "pp": ps.get_pipeline_model_parallel_group(),
            }
            for dom, getter in (("cp", "get_context_parallel_group"), ("ep", "get_expert_model_parallel_group")):
                if hasattr(ps, getter):
                    with contextlib.suppress(Exception):
                        groups[dom] = getattr(ps, getter)()
            return {d: _group_domain(list(dist.get_process_group_ranks(g)), rank) for d, g in groups.items()
                    if g is not None}
        except Exception:
            log.debug("reading %s failed", name, exc_info=True)
    return None


def resolve_domains(rank: int, world: int, declared: dict[str, Iterable[int]] | None = None) -> dict[str, Domain]:
    """Megatron parallel state if present, else the declared groups (ranks of this rank's group
    per domain), else one DP group of the whole world."""
    found = megatron_domains(rank) if dist.is_available() and dist.is_initialized() else None
    if found:
        return found
    if declared:
        return {d: _group_domain(list(ranks), rank) for d, ranks in declared.items()}
    return {"dp": Domain(group=0, size=world, index=rank)}


def torch_rank_info(job: str, *, declared: dict[str, Iterable[int]] | None = None, host: str | None = None,
                    device: int | None = None) -> RankInfo:
    """Rank, world, host and device of this process (torch.distributed, else RANK/WORLD_SIZE)."""
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if device is None:
        device = int(os.environ.get("LOCAL_RANK", str(rank)))
    return RankInfo(job=job, rank=rank, world=world, host=host or socket.gethostname(), device=device,
                    domains=resolve_domains(rank, world, declared), attempt=launcher_attempt(os.environ))


# --- memory and model shape (contract 1.5) ------------------------------------------------------------
def torch_memory_stats(device: torch.device | str | None = None) -> AllocatorStats | None:
    """The allocator statistics of `device` (a CUDA or NPU device), or of the current device of whichever
    accelerator this process has initialised; None on a CPU device, or when none is in use."""
    kind = torch.device(device).type if device is not None else _active_accelerator()
    if kind not in ("cuda", "npu"):
        return None
    module = getattr(torch, kind, None)
    if kind == "npu" and module is None and torch_npu_available():
        module = getattr(torch, "npu", None)  # torch_npu registers torch.npu when imported
    index = torch.device(device).index if device is not None else None
    stats = module_stats(module, f"torch.{kind}")
    if stats is None:
        return None
    mod: Any = module
    capacity = _capacity(mod, index)
    if index is None:
        return dataclasses.replace(stats, capacity=capacity)
    return AllocatorStats(stats.name, functools.partial(mod.max_memory_allocated, index),
                          functools.partial(mod.memory_reserved, index),
                          functools.partial(mod.reset_peak_memory_stats, index), capacity)


def _capacity(module: Any, index: int | None) -> int | None:
    """The device's memory in bytes (`get_device_properties(d).total_memory`, torch.cuda and torch_npu
    alike), None when the module cannot say; read once, never raises."""
    try:
        at = module.current_device() if index is None else index
        return capacity_of(module.get_device_properties(at).total_memory)
    except Exception:
        return None


def _active_accelerator() -> str | None:
    """The accelerator ("cuda" or "npu") whose runtime this process initialised, else None (checked
    without initialising one: a CPU job must not create a CUDA context by asking)."""
    cuda: Any = torch.cuda
    if cuda.is_available() and cuda.is_initialized():
        return "cuda"
    npu: Any = getattr(torch, "npu", None)
    if npu is not None and getattr(npu, "is_available", lambda: False)() and getattr(
            npu, "is_initialized", lambda: False)():
        return "npu"
    return None


def _model_device(model: torch.nn.Module) -> torch.device | None:
    for p in model.parameters():
        return p.device
    return None


# HuggingFace config attribute names per shape field (GPT-2, LLaMA, BERT, T5/OPT spellings), first found wins
_CONFIG_NAMES: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads",),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "d_ff"),
    "vocab": ("vocab_size",),
    "seq": ("max_position_embeddings", "n_positions", "seq_length"),
}


def model_shape_of(model: torch.nn.Module | None = None, config: Any = None, **fields: Any) -> ModelShape | None:
    """What a job's `start` event can say of the model (`schemas.ModelShape`): the parameter count and the
    weights' element size of `model`, layers / hidden / heads / kv_heads / ffn / vocab / seq of a
    HuggingFace-style `config` (attributes or a dict; default `model.config`), and `fields` over both
    (micro_batch, optimizer, recompute, zero_stage, ... which no module says). `seq` from a config is its
    context length (max_position_embeddings): pass `seq=` when training on shorter sequences. None when
    nothing is known or the shape is out of contract (a hook helper never raises into a training script)."""
    try:
        known: dict[str, Any] = {}
        if model is not None:
            params = list(model.parameters())
            if params:
                known["params"] = sum(p.numel() for p in params)
                size = params[0].element_size()
                if size in (1, 2, 4, 8):
                    known["param_bytes"] = size
            if config is None:
                config = getattr(model, "config", None)
        if config is not None:
            get = config.get if isinstance(config, dict) else functools.partial(getattr, config)
            for name, spellings in _CONFIG_NAMES.items():
                for spelling in spellings:
                    value = get(spelling, None)
                    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                        known[name] = value
                        break
        known.update({k: v for k, v in fields.items() if v is not None})
        if not known:
            return None
        shape: ModelShape = decode_object(ModelShape, known, strict=True, path="model_shape")
        return shape
    except Exception:
        log.warning("steplens: the model's shape could not be read", exc_info=True)
        return None


# --- instrumentation -------------------------------------------------------------------------------
COMM_TIMINGS = ("reducer", "python", "off")  # how a DDP model's gradient all-reduce is timed
BUCKET_MAP_READS = 4  # backward passes whose DDP logging data is read to learn the rebuilt first bucket


class _ReducerTiming:
    """Exposed and total all-reduce time of the iteration that just ran backward, from DDP's reducer.

    DDP's C++ reducer stamps, every iteration and whatever its logging sample rate, when each
    parameter's gradient became ready, relative to the end of DDP's forward (`prepare_for_backward`):
    `reducer.get_backward_stats()`, one list copy (~3 µs). A wrapper around `ddp.forward` takes
    perf_counter_ns when that forward returns (the stamps' origin, to a few µs), and backward
    returns only after DDP's final callback waited for every bucket's all-reduce. So, in one clock:
    compute end = origin + last gradient ready, comm end = backward's return, exposed = the gap;
    the all-reduce span starts when DDP's first bucket was complete (its parameters' latest stamp).
    The first bucket is read once from DDP's logging data after it rebuilt its buckets (the first
    BUCKET_MAP_READS backward passes; a model that never rebuilds is taken as one bucket).
    Earlier versions read DDP's full logging data every step at sample rate 1: ~45 µs of
    training-thread CPU per step; this is ~5 µs.
    """

    __slots__ = ("ddp", "first_bucket", "nbytes", "origin", "reads", "size")

    def __init__(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        self.ddp = ddp
        self.nbytes: int | None = sum(p.numel() * p.element_size() for p in ddp.parameters() if p.requires_grad)
        self.size = ddp.process_group.size() if ddp.process_group is not None else dist.get_world_size()
        self.origin = 0  # perf_counter_ns at the end of a forward that armed gradient sync; 0: none pending
        self.first_bucket: Callable[[list[int]], int] | None = None
        self.reads = 0
        orig: Callable[..., Any] = ddp.forward
        is_grad = torch.is_grad_enabled
        pc = time.perf_counter_ns

        def forward(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            # DDP called prepare_for_backward (the stamps' origin) only when it will sync gradients
            self.origin = pc() if is_grad() and ddp.require_backward_grad_sync else 0
            return out

        ddp.forward = forward  # type: ignore[method-assign]  # instance attribute: torch's fast call path stays

    def read(self, backward_end: int) -> tuple[int, int] | None:
        """(all-reduce ns from first bucket ready to last completion, exposed ns), or None when no
        forward armed gradient sync since the last read (no_sync(), a backward not through this model)."""
        origin = self.origin
        if not origin:
            return None
        self.origin = 0
        stats: list[int] = self.ddp.reducer.get_backward_stats()
        if not stats:
            return None
        end = backward_end - origin
        last = max(stats)
        first = self._first_bucket_ready(stats)
        return max(end - min(first, last), 0), max(end - last, 0)

    def _first_bucket_ready(self, stats: list[int]) -> int:
        getter = self.first_bucket
        if getter is None:
            self.reads += 1
            getter = self._learn_first_bucket()
            if getter is None:
                return max(stats)
        return getter(stats)

    def _learn_first_bucket(self) -> Callable[[list[int]], int] | None:
        data: Any = self.ddp.logger._get_ddp_logging_data()  # type: ignore[union-attr]
        rebuilt = data.ints_map.get("has_rebuilt_buckets") == 1
        if not rebuilt and self.reads < BUCKET_MAP_READS:
            return None
        text = data.strs_map.get("rebuilt_per_bucket_param_indices", "") if rebuilt else ""
        first = [int(i) for i in text.split(",")[0].split()] if text else []
        if not first:  # one bucket (or unknown): the span starts at the last gradient
            self.first_bucket = max
            return max
        pick = operator.itemgetter(*first)

        def first_ready(s: list[int]) -> int:
            got = pick(s)
            return max(got) if len(first) > 1 else int(got)

        self.first_bucket = first_ready
        return first_ready

    def close(self) -> None:
        if self.ddp.__dict__.get("forward") is not None:
            del self.ddp.forward


class TorchInstrumentation:
    """The hooks installed into one training process; `remove()` undoes them."""

    def __init__(self, hook: RankHook) -> None:
        self.hook = hook
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []
        self._comm: deque[tuple[int, int, int]] = deque()  # (launch_pc, done_pc, bytes), from gloo/nccl threads
        self._last_launch = 0
        self._in_backward = False
        self._auto = False
        self._dp_size: int | None = None
        self._lock = threading.Lock()
        self.comm_enabled = False  # the DDP comm hook stays registered; it only times while enabled
        self._forward_from_backward = False
        self._reducers: list[_ReducerTiming] = []
        # a DDP model's first-bucket map, once learned, outlives remove(): re-attaching reads no logging data
        self._bucket_maps: weakref.WeakKeyDictionary[Any, Callable[[list[int]], int]] = weakref.WeakKeyDictionary()

    # step boundaries -----------------------------------------------------------------------------
    def attach_optimizer(self, optimizer: Any, *, auto_steps: bool = True) -> None:
        """Optimizer phase; with auto_steps a step ends when optimizer.step() returns."""
        hook = self.hook
        self._auto = auto_steps

        def pre(_opt: Any, _args: Any, _kwargs: Any) -> None:
            hook.phase_begin("optimizer")

        def post(_opt: Any, _args: Any, _kwargs: Any) -> None:
            hook.phase_end("optimizer")
            if self._auto:
                hook.step_end()
                hook.step_begin()

        self._handles.append(optimizer.register_step_pre_hook(pre))
        self._handles.append(optimizer.register_step_post_hook(post))

    def attach_model(self, model: torch.nn.Module, *, forward_hooks: bool = True,
                     comm_timing: str = "reducer") -> None:
        """Forward phase from pre/post hooks on the root module; DDP gets the comm hook.

        forward_hooks=False registers no module hook (a hooked module leaves torch's fast call
        path, which was ~15 µs per step of training-thread CPU in bench/hook_cost.py): the forward
        phase is then the time from the step's batch being ready (or the step's begin) to the start
        of backward, loss included, taken in the patched autograd entry point (patch_autograd).
        Needs explicit step boundaries (with auto steps the first step would not begin).
        """
        hook = self.hook
        if not forward_hooks:
            self._forward_from_backward = True
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                self.attach_ddp(model, timing=comm_timing)
            return

        def fpre(_m: Any, _inp: Any) -> None:
            if self._auto and hook._cur is None:
                hook.step_begin()
            hook.phase_begin("forward")

        def fpost(_m: Any, _inp: Any, _out: Any) -> None:
            hook.phase_end("forward")

        self._handles.append(model.register_forward_pre_hook(fpre))
        self._handles.append(model.register_forward_hook(fpost))
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            self.attach_ddp(model, timing=comm_timing)

    def attach_ddp(self, ddp: torch.nn.parallel.DistributedDataParallel,
                   before_launch: Callable[[], None] | None = None, *, timing: str = "reducer") -> None:
        """Time DDP's gradient all-reduce (COMM_TIMINGS): `reducer` reads DDP's own per-iteration
        timestamps after backward (needs patch_autograd; undone by remove()); `python` registers the
        timing comm hook, once for the DDP model's lifetime (all-reduce per bucket, as DDP's default
        does; `before_launch` runs before each); `off` times nothing."""
        if timing not in COMM_TIMINGS:
            raise ValueError(f"comm timing {timing!r}: expected one of {COMM_TIMINGS}")
        self._dp_size = ddp.process_group.size() if ddp.process_group is not None else dist.get_world_size()
        if timing == "python":
            ddp.register_comm_hook(None, self.comm_hook(before_launch))
        elif timing == "reducer":
            timing_ = _ReducerTiming(ddp)
            timing_.first_bucket = self._bucket_maps.get(ddp)
            self._reducers.append(timing_)

    def comm_hook(self, before_launch: Callable[[], None] | None = None) -> Callable[[Any, Any], Any]:
        """A DDP communication hook: averaged all-reduce of the bucket, timed from launch to completion."""
        comm = self._comm
        # the process group object and its size, looked up once: calling the group's own allreduce
        # skips dist.all_reduce's Python checks (a third of a Python comm hook's cost per bucket)
        groups: dict[Any, tuple[Any, int]] = {}

        def plain_done(f: Any) -> Any:
            return f.value()[0]

        def hook_fn(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects non-GradBucket annotations
            if before_launch is not None:
                before_launch()
            found = groups.get(state)
            if found is None:
                pg = state if state is not None else dist.group.WORLD
                found = groups[state] = (pg, dist.get_world_size(pg))
            pg, world = found
            buf = bucket.buffer()
            if not self.comm_enabled:
                return pg.allreduce([buf.div_(world)]).get_future().then(plain_done)
            nbytes = buf.numel() * buf.element_size()
            launch = self._last_launch = time.perf_counter_ns()
            fut = pg.allreduce([buf.div_(world)]).get_future()

            def done(f: Any) -> Any:  # on the gloo/nccl thread: only a deque append
                comm.append((launch, time.perf_counter_ns(), nbytes))
                return f.value()[0]

            return fut.then(done)

        return hook_fn

    def patch_autograd(self) -> None:
        """Time torch.autograd.backward (B4, what loss.backward() calls) and torch.autograd.grad (B5)."""
        ag: Any = torch.autograd
        orig_backward = ag.backward
        orig_grad = ag.grad
        hook = self.hook

        def backward(*args: Any, **kwargs: Any) -> Any:
            if self._in_backward:
                return orig_backward(*args, **kwargs)
            self._in_backward = True
            self._last_launch = 0
            t0 = time.perf_counter_ns()
            if self._forward_from_backward:
                hook.forward_until(t0)
            try:
                return orig_backward(*args, **kwargs)
            finally:
                t1 = time.perf_counter_ns()
                self._in_backward = False
                hook.add_phase_ms("backward", (t1 - t0) / 1e6)
                self._drain_comm(t1)
                for r in self._reducers:
                    self._read_reducer(r, t1)

        def grad(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return orig_grad(*args, **kwargs)
            finally:
                hook.add_phase_ms("grad", (time.perf_counter_ns() - t0) / 1e6)

        self.comm_enabled = True
        self._patched.append((ag, "backward", orig_backward))
        self._patched.append((ag, "grad", orig_grad))
        ag.backward = backward
        ag.grad = grad

    def _drain_comm(self, backward_end: int) -> None:
        try:
            hook = self.hook
            if self._last_launch:
                hook.add_phase_ms("comm_exposed", max(backward_end - self._last_launch, 0) / 1e6)
            comm, size = self._comm, self._dp_size
            while comm:
                launch, done, nbytes = comm.popleft()
                hook.record_collective("allreduce", done - launch, nbytes=nbytes, domain="dp", group_size=size)
        except Exception:
            self.hook._errors += 1

    def _read_reducer(self, r: _ReducerTiming, backward_end: int) -> None:
        try:
            got = r.read(backward_end)
            if got is not None:
                comm_ns, exposed_ns = got
                hook = self.hook
                hook.add_phase_ms("comm_exposed", exposed_ns / 1e6)
                hook.record_collective("allreduce", comm_ns, nbytes=r.nbytes, domain="dp", group_size=r.size)
        except Exception:
            self.hook._errors += 1

    def patch_collectives(self) -> None:
        """Time explicit torch.distributed collectives (sync: call wall time, which is all exposed)."""
        ops: dict[str, CollectiveOp] = {
            "all_reduce": "allreduce", "all_gather": "allgather", "all_gather_into_tensor": "allgather",
            "reduce_scatter": "reducescatter", "reduce_scatter_tensor": "reducescatter", "broadcast": "broadcast",
            "all_to_all": "alltoall", "all_to_all_single": "alltoall", "barrier": "barrier",
        }
        for fname, op in ops.items():
            orig = getattr(dist, fname, None)
            if orig is None:
                continue
            self._patched.append((dist, fname, orig))
            setattr(dist, fname, self._timed_collective(orig, op))

    def _timed_collective(self, orig: Callable[..., Any], op: CollectiveOp) -> Callable[..., Any]:
        hook = self.hook

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            out = orig(*args, **kwargs)
            if not kwargs.get("async_op", False):
                dur = time.perf_counter_ns() - t0
                nbytes = None
                if args and isinstance(args[0], torch.Tensor):
                    nbytes = args[0].numel() * args[0].element_size()
                hook.record_collective(op, dur, nbytes=nbytes, domain="dp")
                hook.add_phase_ms("comm_exposed", dur / 1e6)
            return out

        return wrapper

    def remove(self) -> None:
        self.comm_enabled = False
        self._forward_from_backward = False
        self._comm.clear()
        for r in self._reducers:
            if r.first_bucket is not None:
                self._bucket_maps[r.ddp] = r.first_bucket
            r.close()
        self._reducers.clear()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for obj, name, orig in reversed(self._patched):
            setattr(obj, name, orig)
        self._patched.clear()


def instrument(hook: RankHook, *, model: torch.nn.Module | None = None, optimizer: Any = None,
               auto_steps: bool = True, autograd: bool = True, collectives: bool = False,
               forward_hooks: bool = True, comm_timing: str = "reducer") -> TorchInstrumentation:
    """Install the PyTorch hooks: the one call that needs no other change to a training script.

    With explicit steps (auto_steps=False, `with hook.step():`) pass forward_hooks=False for the
    cheapest training thread (see TorchInstrumentation.attach_model). `comm_timing` (COMM_TIMINGS)
    picks how a DDP model's all-reduce is timed; `reducer`, the default, needs autograd=True.
    """
    inst = TorchInstrumentation(hook)
    if hook.memory is None:  # the device the model is on, else the accelerator this process uses
        try:
            device = _model_device(model) if model is not None else None
            hook.memory = torch_memory_stats(device) if device is not None else torch_memory_stats()
        except Exception:
            log.warning("steplens: no device memory statistics", exc_info=True)
    if optimizer is not None:
        inst.attach_optimizer(optimizer, auto_steps=auto_steps)
    if model is not None:
        inst.attach_model(model, forward_hooks=forward_hooks or auto_steps or not autograd, comm_timing=comm_timing)
    if autograd:
        inst.patch_autograd()
    if collectives:
        inst.patch_collectives()
    return inst


# --- detailed profiling on command ---------------------------------------------------------------------
_COLLECTIVE_NAMES: tuple[tuple[str, CollectiveOp], ...] = (
    ("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("allgather", "allgather"),
    ("all_gather", "allgather"), ("reduce_scatter", "reducescatter"), ("reducescatter", "reducescatter"),
    ("broadcast", "broadcast"), ("alltoall", "alltoall"), ("all_to_all", "alltoall"), ("barrier", "barrier"),
)


def classify(name: str) -> tuple[KernelCategory, CollectiveOp | None, str | None]:
    """Category, collective op and spec metric id of a profiled op name."""
    low = name.lower()
    for pat, op in _COLLECTIVE_NAMES:
        if pat in low:
            return "comm", op, None
    if "copy" in low or "memcpy" in low or low in ("aten::to", "aten::_to_copy"):
        return "memcpy", None, None
    if "flash" in low or "scaled_dot_product" in low:
        return "compute", None, "F1"
    if "bmm" in low or "batchmatmul" in low or "baddbmm" in low:
        return "compute", None, "F3"
    if "mm" in low or "matmul" in low or "linear" in low:
        return "compute", None, "F2"
    if "synchron" in low:
        return "sync", None, None
    return "compute", None, None


class TorchProfilerBackend:
    """torch.profiler (Kineto) for the requested steps; torch_npu.profiler on Ascend.

    Steps are delimited by `record_function("steplens.step#<n>")` ranges; every top-level op
    (of any thread: the training thread's, the autograd engine's, gloo/nccl's collectives) that
    starts inside a step's range becomes one of that step's kernel records.
    """

    def __init__(self, req: ProfileRequest) -> None:
        self.req = req
        self._npu = torch_npu_available()
        self._prof: Any = None
        self._marker: Any = None
        self._wall: dict[int, int] = {}

    @property
    def format(self) -> ProfileFormat:
        return "ascend_pt" if self._npu else "kineto"

    def _open_marker(self, step: int) -> None:
        self._marker = torch.profiler.record_function(f"{MARKER}{step}")
        self._wall[step] = time.time_ns()
        self._marker.__enter__()

    def start(self, step: int) -> None:
        self.req.out_dir.mkdir(parents=True, exist_ok=True)
        if self._npu:
            tnp: Any = importlib.import_module("torch_npu")
            acts = [tnp.profiler.ProfilerActivity.CPU, tnp.profiler.ProfilerActivity.NPU]
            self._prof = tnp.profiler.profile(
                activities=acts, record_shapes=True,
                on_trace_ready=tnp.profiler.tensorboard_trace_handler(str(self.req.out_dir)))
        else:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True)
        self._prof.__enter__()
        self._open_marker(step)

    def step(self, step: int) -> None:
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        if step < self.req.step_last:
            self._open_marker(step + 1)

    def stop(self) -> ProfileResult:
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        self._prof.__exit__(None, None, None)
        uri: Path = self.req.out_dir
        if not self._npu:
            uri = self.req.out_dir / "trace.json"
            self._prof.export_chrome_trace(str(uri))
        kernels, dropped = self._kernels()
        return ProfileResult(format=self.format, uri=uri, nbytes=dump_bytes(uri), kernels=kernels, dropped=dropped)

    def _kernels(self) -> tuple[dict[int, list[KernelRecord]], dict[int, int]]:
        events = list(self._prof.events())
        ranges: list[tuple[float, float, int]] = []
        for ev in events:
            if ev.name.startswith(MARKER):
                ranges.append((ev.time_range.start, ev.time_range.end, int(ev.name[len(MARKER):])))
        ranges.sort()
        out: dict[int, list[KernelRecord]] = {s: [] for _, _, s in ranges}
        dropped: dict[int, int] = dict.fromkeys(out, 0)
        for ev in events:
            parent = ev.cpu_parent
            if ev.name.startswith(MARKER) or (parent is not None and not parent.name.startswith(MARKER)):
                continue
            t = ev.time_range.start
            hit = next((r for r in ranges if r[0] <= t <= r[1]), None)
            if hit is None:
                continue
            s0, _, step = hit
            if len(out[step]) >= MAX_PROFILED_KERNELS_PER_STEP:
                dropped[step] += 1
                continue
            cat, op, metric = classify(ev.name)
            flops = getattr(ev, "flops", None) or None
            out[step].append(KernelRecord(
                name=ev.name, cat=cat, start_ns=self._wall[step] + int((t - s0) * 1000),
                dur_ns=int(ev.time_range.elapsed_us() * 1000), metric=metric, op=op, flops=flops,
                domain="dp" if cat == "comm" else None,
            ))
        return out, dropped


def torch_profiler_factory(req: ProfileRequest) -> TorchProfilerBackend:
    return TorchProfilerBackend(req)


__all__ = [
    "COMM_TIMINGS", "TorchInstrumentation", "TorchProfilerBackend", "classify", "instrument", "megatron_domains",
    "resolve_domains", "torch_npu_available", "torch_profiler_factory", "torch_rank_info",
]
