"""The OOM forecast from the steps' allocator statistics (contract 1.5): a leak, fragmentation, and the
high-but-steady memory that must raise nothing."""

from __future__ import annotations

import numpy as np

from streams.detect.scopes import memory
from streams.detect.scopes.finding import Finding
from streams.detect.windows.step_frames import Frame, ReportedLayout

GIB = 2**30
CAP = 64 * GIB
PARAMS = memory.Params(oom_horizon_steps=200.0, oom_min_growth_pct_per_step=0.01, oom_window=48, oom_t_min=6.0,
                       resolve_after_steps=5)


def _frame(step: int, peak: np.ndarray, reserved: np.ndarray, capacity: float = CAP) -> Frame:
    world = peak.size
    f = Frame.empty(step, world, 0)
    f.seen[:] = True
    f.memory = np.stack([peak, reserved, np.full(world, float(capacity))])
    return f


def _run(peaks: list[np.ndarray], reserveds: list[np.ndarray]) -> list[tuple[int, Finding]]:
    topo = ReportedLayout()
    topo.grow(peaks[0].size)
    state = memory.MemoryState()
    out: list[tuple[int, Finding]] = []
    for step, (p, r) in enumerate(zip(peaks, reserveds, strict=True)):
        state, found = memory.evaluate(_frame(step, p, r), topo, state, PARAMS)
        out.extend((step, f) for f in found)
    return out


def test_a_leak_on_one_rank_is_forecast_well_before_capacity() -> None:
    rng = np.random.default_rng(1)
    world, steps = 8, 400
    base = 40 * GIB + rng.uniform(0, 2 * GIB, world)
    peaks, reserveds = [], []
    oom_step = None
    for s in range(steps):
        p = base + rng.normal(0, 0.05 * GIB, world)
        p[3] += max(0, s - 50) * 80 * 2**20  # 80 MiB a step from step 50
        peaks.append(p)
        reserveds.append(np.maximum(p + 2 * GIB, 0))
        if oom_step is None and p[3] + 2 * GIB >= CAP:  # the allocator's reserve can grow no more
            oom_step = s
    found = _run(peaks, reserveds)
    assert oom_step is not None and found
    first_step, first = found[0]
    assert {f.ranks[0] for _, f in found} == {3} and first.metric == "mem_peak_bytes"
    assert oom_step - first_step >= 50  # time to act
    assert abs(first.evidence["oom_step"] - oom_step) <= 0.1 * (oom_step - first_step)
    assert "fragmentation" not in first.evidence


def test_reserved_growing_over_a_flat_peak_is_named_fragmentation() -> None:
    rng = np.random.default_rng(2)
    world = 4
    peaks, reserveds = [], []
    held = np.full(world, 44.0 * GIB)
    for s in range(500):
        p = np.full(world, 38.0 * GIB) + rng.normal(0, 0.2 * GIB, world)
        if s > 30:
            held[1] += 64 * 2**20 * (rng.random() < 0.9)  # the cache takes segments it never gives back
        peaks.append(p)
        reserveds.append(np.maximum(held, p))
    found = _run(peaks, reserveds)
    assert found and {f.ranks[0] for _, f in found} == {1}
    f = found[0][1]
    assert f.evidence.get("fragmentation") == 1.0 and f.metric == "mem_reserved_bytes"
    assert "fragmentation" in f.summary and "expandable_segments" in (f.suggestion or "")


def test_memory_high_but_steady_or_a_per_step_sawtooth_raises_nothing() -> None:
    rng = np.random.default_rng(3)
    world = 16
    level = rng.uniform(0.90, 0.97, world) * CAP
    peaks = [level + rng.normal(0, 0.003 * CAP, world) + (0.01 * CAP if s % 2 else 0.0) for s in range(600)]
    reserveds = [np.minimum(np.maximum(p, level + 0.02 * CAP), CAP) for p in peaks]
    assert _run(peaks, reserveds) == []


def test_the_model_shape_s_expectation_is_named_with_the_leak() -> None:
    world = 2
    state = memory.MemoryState(expected_bytes=30.0 * GIB, expected_dominant="optimizer_states")
    topo = ReportedLayout()
    topo.grow(world)
    found = []
    for s in range(300):
        p = np.array([40.0 * GIB + s * 100 * 2**20, 40.0 * GIB]) + np.array([1, -1]) * (s % 3) * 2**24
        state, f = memory.evaluate(_frame(s, p, p + GIB), topo, state, PARAMS)
        found.extend(f)
    assert found
    assert "model's shape accounts for 30.0 GiB (mostly optimizer states)" in found[0].summary
    assert found[0].evidence["expected_peak_bytes"] == 30.0 * GIB


def test_frames_without_memory_cost_nothing_and_raise_nothing() -> None:
    topo = ReportedLayout()
    topo.grow(4)
    state = memory.MemoryState()
    f = Frame.empty(0, 4, 0)
    f.seen[:] = True
    state2, found = memory.evaluate(f, topo, state, PARAMS)
    assert found == [] and state2.peak is None
