"""Contract 1.5 in the rank hook: the device allocator's per-step peak and reserved bytes, and the model's
shape on the job's `start` (pure unit tests: a stand-in allocator, the in-memory exporter for Kafka)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook.core import RankHook, RankInfo
from producers.hook.memory import AllocatorStats, module_stats
from schemas import Domain, JobEvent, ModelShape, StepEvent, decode

RANK = RankInfo(job="job-m", rank=0, world=2, host="node-0", device=0,
                domains={"dp": Domain(group=0, size=2, index=0)}, attempt=1)


class StandInAllocator:
    """PyTorch's allocator statistics as a stand-in: `alloc` raises the live bytes (and the peak), `free`
    lowers them, the peak is reset to the live bytes as torch's `reset_peak_memory_stats` does."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.reserved_bytes = 0
        self.resets = 0

    def alloc(self, n: int) -> None:
        self.live += n
        self.peak = max(self.peak, self.live)
        self.reserved_bytes = max(self.reserved_bytes, self.live)

    def free(self, n: int) -> None:
        self.live -= n

    def max_memory_allocated(self) -> int:
        return self.peak

    def memory_reserved(self) -> int:
        return self.reserved_bytes

    def reset_peak_memory_stats(self) -> None:
        self.peak = self.live
        self.resets += 1


def _hook(exporter: InMemoryExporter, **kw: object) -> RankHook:
    return RankHook(RANK, lambda: BackgroundEmitter(exporter), **kw)  # type: ignore[arg-type]


def _events(hook: RankHook, exporter: InMemoryExporter) -> list[object]:
    assert hook.flush(10)
    return [decode(v) for v in exporter.values()]


def test_each_step_carries_its_own_peak_and_the_reserved_bytes_at_its_end() -> None:
    device = StandInAllocator()
    device.alloc(5_000)  # the model, loaded before the first step
    device.alloc(70_000)
    device.free(70_000)  # a warm-up spike: no step's peak
    stats = module_stats(device, "stand-in")
    assert stats is not None
    exporter = InMemoryExporter()
    hook = _hook(exporter, memory=replace(stats, capacity=1_000_000))
    leak = 0
    for step in range(4):
        with hook.step():
            activations = 1_000 * (step + 1)  # each step a larger transient
            device.alloc(activations)
            device.free(activations)
            device.alloc(100)  # a leak: 100 bytes a step stay
            leak += 100
    steps = [e for e in _events(hook, exporter) if isinstance(e, StepEvent)]
    assert [s.mem_peak_bytes for s in steps] == [5_000 + 100 * i + 1_000 * (i + 1) for i in range(4)]
    assert all(s.mem_reserved_bytes == 75_000 for s in steps)  # the warm-up's reservation stays cached
    assert all(s.mem_capacity_bytes == 1_000_000 for s in steps)
    assert device.resets == 1 + 4  # once before the first step, then at each step's end
    assert hook.stats().errors == 0
    assert hook.close(10)


def test_a_cpu_rank_sends_no_memory_fields() -> None:
    exporter = InMemoryExporter()
    hook = _hook(exporter)
    with hook.step():
        pass
    (step,) = [e for e in _events(hook, exporter) if isinstance(e, StepEvent)]
    assert step.mem_peak_bytes is None and step.mem_reserved_bytes is None
    assert b"mem_peak_bytes" not in exporter.values()[0]  # left out, not null
    assert hook.close(10)


def test_a_failing_allocator_costs_the_fields_never_the_step() -> None:
    def broken() -> int:
        raise RuntimeError("device lost")

    exporter = InMemoryExporter()
    hook = _hook(exporter, memory=AllocatorStats("broken", broken, broken, lambda: None))
    for _ in range(2):
        with hook.step():
            pass
    steps = [e for e in _events(hook, exporter) if isinstance(e, StepEvent)]
    assert len(steps) == 2 and all(s.mem_peak_bytes is None for s in steps)
    assert hook.stats().errors == 3  # the reset before step 0 and the read at each end, counted
    assert hook.close(10)


@pytest.mark.parametrize("value", [-1, 2**64, 1.5, None, True])
def test_a_statistic_out_of_contract_is_left_out(value: object) -> None:
    stats = AllocatorStats("odd", lambda: value, lambda: 7, lambda: None)  # type: ignore[arg-type,return-value]
    assert stats.read() == (None, 7)


def test_a_module_without_the_allocator_api_gives_none() -> None:
    assert module_stats(object(), "none") is None
    assert module_stats(None, "none") is None


def test_job_start_carries_the_model_shape_and_attempt() -> None:
    exporter = InMemoryExporter()
    shape = ModelShape(params=7_000_000_000, layers=32, hidden=4096, heads=32, seq=4096, micro_batch=1,
                       precision=2, optimizer="adam", zero_stage=3, zero_degree=8)
    hook = _hook(exporter, model_shape=shape)
    assert hook.job_start(model="llama-7b", kernel_summaries=True)
    with hook.step():
        pass
    assert hook.job_end()
    jobs = [e for e in _events(hook, exporter) if isinstance(e, JobEvent)]
    start, end = jobs
    assert (start.phase, start.model_shape, start.parallel, start.attempt, start.model) == (
        "start", shape, {"dp": 2}, 1, "llama-7b")
    assert (end.phase, end.last_step, end.model_shape) == ("end", 0, None)
    assert hook.close(10)
