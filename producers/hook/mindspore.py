"""MindSpore integration: a `mindspore.train.Callback` that drives the rank hook.

`model.train(epochs, dataset, callbacks=[StepLensCallback(hook)])` is the only change to a
training script. Step begin/end come from on_train_step_begin/on_train_step_end.

Data sink aware: with `dataset_sink_mode=True` MindSpore runs `sink_size` steps on the device
per callback, so `cur_step_num` advances by k > 1 between two step-end calls. The callback
then emits k step events that split the measured interval evenly (per-step resolution inside
a sink is not observable from the host; the events say so through equal durations) and
leaves the data phase unset, since data loading happens on the device queue.

Profiling on command uses MindSpore's own `Profiler` (dump format `msprof` on Ascend).

Memory (contract 1.5): on an Ascend or GPU device target the callback gives the hook MindSpore's
allocator statistics (`mindspore.runtime.max_memory_allocated` / `memory_reserved` /
`reset_peak_memory_stats`, 2.3 on; `mindspore.hal` before), read and reset per step. A sink of k
steps is one interval to the host: its peak is the sink's, put on each of its k step events. On
the CPU target the fields stay out.
"""

from __future__ import annotations

import time
from typing import Any

import mindspore
from mindspore.train import Callback

from producers.hook.core import RankHook
from producers.hook.memory import AllocatorStats, module_stats
from producers.hook.profiling import ProfileRequest, ProfileResult, dump_bytes
from schemas import Phases, StepEvent


def mindspore_memory_stats() -> AllocatorStats | None:
    """MindSpore's allocator statistics when the device target is Ascend or GPU, else None (CPU: no
    device allocator); never raises."""
    try:
        if mindspore.get_context("device_target") not in ("Ascend", "GPU"):
            return None
        for name in ("runtime", "hal"):
            stats = module_stats(getattr(mindspore, name, None), f"mindspore.{name}")
            if stats is not None:
                return stats
    except Exception:
        return None
    return None


class StepLensCallback(Callback):  # type: ignore[misc]  # mindspore is untyped
    """Emits a step event per training step (or per sunk step) through `hook`."""

    def __init__(self, hook: RankHook, *, samples_per_step: int | None = None,
                 tokens_per_step: int | None = None, flops_per_step: float | None = None) -> None:
        super().__init__()
        self.hook = hook
        self.samples = samples_per_step
        self.tokens = tokens_per_step
        self.flops = flops_per_step
        self._last_step = 0  # cur_step_num at the previous step end (1-based in MindSpore)
        self._begin_wall = 0
        self._begin_pc = 0
        if hook.memory is None:
            hook.memory = mindspore_memory_stats()

    def on_train_step_begin(self, run_context: Any) -> None:
        try:
            self._begin_wall = time.time_ns()
            self._begin_pc = time.perf_counter_ns()
            self.hook.step_begin(self._last_step)
        except Exception:
            self.hook._errors += 1

    def on_train_step_end(self, run_context: Any) -> None:
        try:
            cur = int(run_context.original_args()["cur_step_num"])
            k = cur - self._last_step  # > 1 when the device ran a whole sink of steps
            if k <= 1:
                self.hook.step_end(samples=self.samples, tokens=self.tokens, batch_size=self.samples,
                                   flops=self.flops)
            else:
                self.hook._cur = None  # the sink's interval is split into k steps below
                self._emit_sunk(k)
            self._last_step = cur
        except Exception:
            self.hook._errors += 1

    def _emit_sunk(self, k: int) -> None:
        t = time.perf_counter_ns()
        # earlier steps still sit in the hook's builder thread: let them leave first so one rank's
        # steps stay in order on the wire (bounded: a sink boundary, not every step, waits at most 50 ms)
        self.hook._drain_builder(timeout=0.05)
        total = t - self._begin_pc
        r = self.hook.rank
        peak, reserved = self.hook._read_memory()  # the sink's, on each of its steps
        each = total // k
        for i in range(k):
            start = self._begin_wall + i * each
            self.hook.emit(StepEvent(
                job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device, domains=r.domains,
                step=self._last_step + i, start_ns=start, end_ns=start + each, phases=Phases(),
                samples=self.samples, tokens=self.tokens, batch_size=self.samples, flops=self.flops,
                peak_flops=self.hook.peak_flops, attempt=r.attempt, mem_peak_bytes=peak,
                mem_reserved_bytes=reserved,
                mem_capacity_bytes=self.hook.memory.capacity if self.hook.memory is not None and peak is not None
                else None,
            ))
        self.hook._overhead += time.perf_counter_ns() - t


class MindSporeProfilerBackend:
    """MindSpore's Profiler for the requested steps; the dump directory is the pointer."""

    def __init__(self, req: ProfileRequest) -> None:
        import mindspore

        self.req = req
        req.out_dir.mkdir(parents=True, exist_ok=True)
        self._prof = mindspore.Profiler(start_profile=False, output_path=str(req.out_dir))

    def start(self, step: int) -> None:
        self._prof.start()

    def step(self, step: int) -> None:
        pass

    def stop(self) -> ProfileResult:
        self._prof.stop()
        self._prof.analyse()
        return ProfileResult(format="msprof", uri=self.req.out_dir, nbytes=dump_bytes(self.req.out_dir))


def mindspore_profiler_factory(req: ProfileRequest) -> MindSporeProfilerBackend:
    return MindSporeProfilerBackend(req)


__all__ = ["MindSporeProfilerBackend", "StepLensCallback", "mindspore_profiler_factory"]
