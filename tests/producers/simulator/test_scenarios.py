"""Every catalogue scenario moves the raw metrics the spec names by the stated magnitude.

Each check compares a faulty run with its healthy twin (same topology, model and seed, no
fault) over the fault's steps, on the simulator's arrays (no pipeline). Magnitudes are the
spec §4 "what it looks like" column (cooling loss: ≥ 85 °C and −20 % compute; link
degradation: AllReduce ×2; ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from producers.simulator.catalogue import SCENARIOS, FaultSpec, build_faults, layout
from producers.simulator.events import FrameEncoder
from producers.simulator.fleet import FleetJob, StepFrame
from producers.simulator.traits import Traits
from schemas import decode
from schemas.incident import RULE_IDS
from streams.detect.rules.base import FloatArray

STEPS = 60
SEED = 3


@dataclass(frozen=True)
class Pair:
    job: FleetJob
    fault: FaultSpec
    bad: list[StepFrame]
    good: list[StepFrame]

    @property
    def window(self) -> range:
        return range(self.fault.start, self.fault.last_step(STEPS) + 1)

    @property
    def ranks(self) -> list[int]:
        return list(self.fault.ranks)

    def kind(self, key: str) -> int:
        return self.job.plan.kind_index[key]

    def per_call(self, frames: list[StepFrame], key: str, ranks: list[int] | None = None) -> float:
        """Mean device time of one call of `key`, waits excluded (the longest call less its share of the waits)."""
        i = self.kind(key)
        r = self.ranks if ranks is None else ranks
        return float(np.mean([longest_transfer(f)[i, r] for f in (frames[s] for s in self.window)]))

    def total(self, frames: list[StepFrame], key: str, ranks: list[int] | None = None) -> float:
        i = self.kind(key)
        r = self.ranks if ranks is None else ranks
        return float(np.mean([f.k_total_ns[i, r] for f in (frames[s] for s in self.window)]))

    def phase(self, frames: list[StepFrame], name: str, ranks: list[int] | None = None) -> float:
        r = self.ranks if ranks is None else ranks
        return float(np.mean([frames[s].phases[name][r] for s in self.window]))

    def durations(self, frames: list[StepFrame]) -> np.ndarray:
        return np.array([frames[s].duration_ms for s in self.window])

    def device(self, frames: list[StepFrame], name: str, ranks: list[int] | None = None) -> np.ndarray:
        r = self.ranks if ranks is None else ranks
        return np.array([getattr(t, name)[r].mean() for s in self.window for t in frames[s].ticks])

    def last_tick(self, name: str, ranks: list[int] | None = None) -> np.ndarray:
        r = self.ranks if ranks is None else ranks
        ticks = [t for s in self.window for t in self.bad[s].ticks]
        return np.asarray(getattr(ticks[-1], name)[r])

    def cu(self, frames: list[StepFrame], ranks: list[int] | None = None) -> float:
        r = self.ranks if ranks is None else ranks
        return float(np.mean([1 - frames[s].launch_mad_us[r] / frames[s].launch_mean_us[r] for s in self.window]))


def longest_transfer(f: StepFrame) -> np.ndarray:
    """[kinds, world] one call's time x1.15 (`k_max_ns` less the waits the collective_wait trait spread over it)."""
    return f.k_max_ns - f.k_wait_ns / np.maximum(f.k_count, 1)


@cache
def pair(name: str) -> Pair:
    sc = SCENARIOS[name]
    topo = sc.topology(64)
    faults = build_faults(sc, topo, STEPS, SEED)
    # the fault's own effect: the traits that vary healthy work from step to step are off (test_traits.py)
    quiet = Traits().without(["variable_length", "heavy_tail"])
    bad = FleetJob("bad", topo, STEPS, faults, SEED, model=sc.model(topo), traits=quiet)
    good = FleetJob("good", topo, STEPS, (), SEED, model=sc.model(topo), traits=quiet)
    return Pair(bad, faults[0], list(bad.iter_frames()), list(good.iter_frames()))


def others(p: Pair) -> list[int]:
    return sorted(set(range(p.job.world)) - set(p.ranks))


def _unstable_power(p: Pair) -> None:
    power = p.device(p.bad, "power_w")
    assert power.max() / power.min() >= 1.25  # ±15 % swings
    d = p.durations(p.bad)
    assert d.max() / d.min() > 1.3  # step time swings > 30 %


def _cooling_loss(p: Pair) -> None:
    temps = p.device(p.bad, "temp_c")
    assert temps[-1] >= 85.0 and temps[-1] > temps[len(temps) // 2]  # ≥ 85 °C and rising
    assert p.per_call(p.bad, "F1:1x8x128x4096x4096") >= 1.25 * p.per_call(p.good, "F1:1x8x128x4096x4096")  # −20 %


def _chip_degradation(p: Pair) -> None:
    key = next(k for k in p.job.plan.kind_index if k.startswith("F2:"))
    assert p.per_call(p.bad, key) >= 1.4 * p.per_call(p.good, key)  # Matmul time +50 %
    kind = p.job.plan.kinds[p.kind(key)]
    achieved = kind.flops / (p.per_call(p.bad, key) / 1.15 / 1e9)
    bench = kind.flops / (kind.call_ns / 1e9)
    assert achieved < 0.7 * bench
    # peak FLOP/s = units x clock: the always-on trace of the lost peak is a down-clocked chip (spec §3 > 5 %)
    assert p.device(p.bad, "freq_mhz").max() < 0.7 * p.device(p.good, "freq_mhz").min()


def _memory_bottleneck(p: Pair) -> None:
    assert p.device(p.bad, "membw_pct").mean() < 40.0
    assert p.per_call(p.bad, "h2d") >= 2.2 * p.per_call(p.good, "h2d")  # copy rate −60 %


def _link_degradation(p: Pair) -> None:
    assert p.per_call(p.bad, "allreduce/dp") >= 1.9 * p.per_call(p.good, "allreduce/dp")  # AllReduce ×2


def _slow_attention(p: Pair) -> None:
    assert p.per_call(p.bad, "F1:1x8x128x4096x4096") >= 2.3 * p.per_call(p.good, "F1:1x8x128x4096x4096")  # 40 %


def _redundant_grad(p: Pair) -> None:
    assert p.phase(p.bad, "backward_ms") >= 1.8 * p.phase(p.good, "backward_ms")
    i = p.kind("B1:1x8x128x4096x4096")
    assert p.bad[p.fault.start].k_count[i, 0] == 2 * p.good[p.fault.start].k_count[i, 0]  # FA-grad repeated


def _memory_mismanagement(p: Pair) -> None:
    assert p.device(p.bad, "mem_pct").min() >= 90.0
    assert p.per_call(p.bad, "h2d") >= 2.5 * p.per_call(p.good, "h2d")


def _gc_leak(p: Pair) -> None:
    assert max(p.bad[s].phases["gc_ms"][p.ranks].max() for s in p.window) > 500.0
    mem = p.device(p.bad, "mem_pct")
    steps = len(p.window)
    assert mem[-1] - mem[0] >= 0.6 * 10.0 * steps / 100.0  # +10 % per 100 steps (sample noise allowed)


def _memory_leak(p: Pair) -> None:
    from producers.simulator.catalogue import leak_pct

    mem = p.device(p.bad, "mem_pct")
    per_step = (mem[-1] - mem[0]) / (len(p.window) - 1)
    assert per_step == pytest.approx(leak_pct(p.fault), rel=0.5)  # its bytes per step, as a share of the device
    rest = others(p)
    assert np.abs(p.device(p.bad, "mem_pct", rest) - p.device(p.good, "mem_pct", rest)).max() < 0.5
    peak = _allocator_memory(p, "mem_peak_pct")  # the allocator's peak grows by the leak's bytes too
    assert (peak[-1] - peak[0]) / (len(p.window) - 1) == pytest.approx(leak_pct(p.fault), rel=0.2)


def _allocator_memory(p: Pair, what: str) -> FloatArray:
    """Per step of the window, the bad rank's allocator statistic (% of capacity), `mem_peak_pct` or reserved."""
    (rank,) = p.ranks
    return np.array([getattr(p.bad[s], what)[rank] for s in p.window])


def _allocator_fragmentation(p: Pair) -> None:
    from producers.simulator.catalogue import leak_pct

    peak, reserved = _allocator_memory(p, "mem_peak_pct"), _allocator_memory(p, "mem_reserved_pct")
    steps = len(p.window) - 1
    assert (reserved[-1] - reserved[0]) / steps == pytest.approx(leak_pct(p.fault), rel=0.3)  # stranded segments
    assert abs(peak[-1] - peak[0]) < 0.5 and np.all(np.diff(reserved) >= 0)  # the step allocates what it did
    mem = p.device(p.bad, "mem_pct")  # the device holds what the allocator reserved
    assert (mem[-1] - mem[0]) / steps == pytest.approx(leak_pct(p.fault), rel=0.5)


def _moe_imbalance(p: Pair) -> None:
    key = next(k for k in p.job.plan.kind_index if k.startswith("F4:"))
    hot, cold = p.ranks[: len(p.ranks) // 2], p.ranks[len(p.ranks) // 2:]
    assert p.per_call(p.bad, key, hot) >= 1.55 * p.per_call(p.good, key, hot)  # FFN FLOP/s −40 %
    assert p.per_call(p.bad, key, cold) <= 0.75 * p.per_call(p.good, key, cold)  # +40 %
    assert p.device(p.bad, "aicore_pct", hot).min() == 100.0
    assert p.device(p.bad, "aicore_pct", cold).max() <= 20.0  # idle > 80 %


def _compile_defect(p: Pair) -> None:
    mean = np.mean([p.bad[s].launch_mean_us for s in p.window])
    assert mean > 100.0  # launch latency > 100 µs
    assert p.cu(p.bad) < 0.7 <= p.cu(p.good)  # R8: only the recompiled launches are slow, latency non-uniform


def _bad_data_format(p: Pair) -> None:
    assert p.phase(p.bad, "data_ms") >= 1.7 * p.phase(p.good, "data_ms")  # batch latency 1.8×
    assert p.per_call(p.good, "h2d") / p.per_call(p.bad, "h2d") <= 0.65  # H2D rate −40 %


def _interstep(p: Pair) -> None:
    share = [p.bad[s].phases["interstep_cpu_ms"][p.ranks] / p.bad[s].duration_ms for s in p.window]
    assert np.min(share) > 0.5  # > 50 % of the step


def _bad_batch_size(p: Pair) -> None:
    assert p.device(p.bad, "mem_pct").min() >= 95.0 and p.device(p.bad, "aicore_pct").max() <= 50.0


def _cache_failure(p: Pair) -> None:
    thr = np.array([1.0 / np.median(p.bad[s].phases["data_ms"]) for s in p.window])  # median: hiccups aside
    healthy = np.array([1.0 / np.median(p.good[s].phases["data_ms"]) for s in p.window])
    assert thr.max() / thr.min() >= 1.5 and healthy.max() / healthy.min() < 1.2  # ±25 %


def _unbalanced_scheduling(p: Pair) -> None:
    busy, starved = p.ranks[: len(p.ranks) // 2], p.ranks[len(p.ranks) // 2:]
    assert p.device(p.bad, "aicore_pct", busy).min() == 100.0
    assert p.device(p.bad, "aicore_pct", starved).max() <= 30.0
    assert p.cu(p.bad, starved) < 0.7 <= p.cu(p.good, starved)


def _wrong_dp_topology(p: Pair) -> None:
    i = p.kind("allreduce/dp")
    spread = np.mean([longest_transfer(p.bad[s])[i, p.ranks].max() / longest_transfer(p.bad[s])[i, p.ranks].min()
                      for s in p.window])
    assert spread > 3.0  # intra-group latency spread > 3×


def _early_stream_sync(p: Pair) -> None:
    assert p.phase(p.bad, "optimizer_ms") - p.phase(p.good, "optimizer_ms") > 500.0
    idle = 1.0 - p.device(p.bad, "aicore_pct").mean() / 100.0
    assert idle >= 0.35


def _uncompressed_gradients(p: Pair) -> None:
    i = p.kind("allreduce/dp")
    share = np.mean([p.bad[s].k_count[i] * longest_transfer(p.bad[s])[i] / 1.15 / 1e6 / p.bad[s].duration_ms
                     for s in p.window])
    assert share > 0.4  # comm > 40 % of the step
    kind = p.job.plan.kinds[i]
    link = p.job.hardware.inter if kind.link == "inter" else p.job.hardware.intra
    traffic = float(np.mean([p.bad[s].k_bytes[i, 0] / p.bad[s].k_count[i, 0] for s in p.window])) * 2 * 7 / 8
    assert traffic / (p.per_call(p.bad, "allreduce/dp", [0]) / 1.15) >= 0.9 * link.bw_gbps  # link BW util ≥ 90 %


def _cpu_device_mismatch(p: Pair) -> None:
    assert p.cu(p.bad) < 0.7
    share = np.mean([p.bad[s].k_total_ns[p.kind("h2d"), p.ranks] / 1e6 / p.bad[s].duration_ms for s in p.window])
    assert share > 0.3


def _minority_kernels(p: Pair) -> None:
    assert p.durations(p.bad).mean() >= 1.15 * p.durations(p.good).mean()  # step +20 %
    v = []
    for s in p.window:
        f = p.bad[s]
        inter = f.phases["interstep_cpu_ms"]
        v.append(np.mean((f.duration_ms - inter - f.k_total_ns.sum(axis=0) / 1e6) / (f.duration_ms - inter)))
    assert np.mean(v) >= 0.4  # V_minority ≥ 40 %


def _timing_conflicts(p: Pair) -> None:
    extra = p.durations(p.bad) - p.durations(p.good)
    assert extra.max() >= 1000.0 and (extra > 900.0).sum() >= 2
    for name in ("forward_ms", "backward_ms", "data_ms"):  # no single metric off
        assert p.phase(p.bad, name) == pytest.approx(p.phase(p.good, name), rel=0.05)


def _hermes_gc_moe(p: Pair) -> None:
    gc = np.array([p.bad[s].phases["gc_ms"] for s in p.window])
    assert (gc > 300).mean() > 0.1  # many ranks pause, not all at once
    assert (p.durations(p.bad) > 1.3 * p.durations(p.good)).sum() >= 3  # throughput dips lasting steps


def _gc_scatter(p: Pair) -> None:
    """A few random ranks pause in some steps: each hit step has one to four ranks far above their usual GC
    time, the hits land on many different ranks, and the other steps have none."""
    extra = np.array([p.bad[s].phases["gc_ms"] - p.good[s].phases["gc_ms"] for s in p.window])
    hit = extra > 150.0
    per_step = hit.sum(axis=1)
    assert 0.1 < (per_step > 0).mean() < 0.7, (per_step > 0).mean()  # some steps, not all
    assert per_step.max() <= 4 and len(np.flatnonzero(hit.any(axis=0))) >= 8  # few at once, many over the run


def _hermes_foreign_process(p: Pair) -> None:
    busy = np.mean([p.bad[s].busy_ms for s in p.window], axis=0)
    assert int(np.argmax(busy[p.ranks])) == p.ranks.index(3)  # rank 3 slowest
    d = p.durations(p.bad)
    assert d.max() / np.median(d) > 4.0  # spikes (444 → 3,027 ms in Hermes)


def _hermes_bad_links(p: Pair) -> None:
    assert p.per_call(p.bad, "allreduce/dp") >= 1.3 * p.per_call(p.good, "allreduce/dp")


def _slow_compute_one(p: Pair) -> None:
    busy = np.mean([p.bad[s].busy_ms for s in p.window], axis=0)
    assert busy[p.ranks].min() > 1.2 * np.median(busy[others(p)])


def _slow_data_rank(p: Pair) -> None:
    # only its input is slow: +30 % of a step of data loading, compute as healthy; the peers of its TP
    # group wait that long inside their TP all-reduce (collective_wait), its own is the shortest
    assert p.phase(p.bad, "data_ms") > p.phase(p.good, "data_ms") + 0.25 * p.job.nominal_ms
    assert p.phase(p.bad, "forward_ms") == pytest.approx(p.phase(p.good, "forward_ms"), rel=0.05)
    tp = p.kind("allreduce/tp")
    peers = np.flatnonzero(p.job.topology.group_ids["tp"] == p.job.topology.group_ids["tp"][p.ranks[0]])
    for s in p.window:
        kernels = p.bad[s].k_total_ns[tp, peers]
        assert p.bad[s].k_total_ns[tp, p.ranks[0]] == kernels.min()
        assert kernels.max() - kernels.min() > 0.25 * p.job.nominal_ms * 1e6


def _bursty_rank(p: Pair) -> None:
    busy = np.array([f.busy_ms for f in p.bad])
    slow = busy[:, p.ranks[0]] > 1.15 * np.median(busy[:, others(p)], axis=1)
    expected = [s for s in range(p.fault.start, STEPS) if (s - p.fault.start) % 25 < 5]
    assert np.flatnonzero(slow[10:]).tolist() == [s - 10 for s in expected]  # bursts of 5 every 25, nothing else


def _hung(p: Pair) -> None:
    after = p.bad[p.fault.start:]
    assert not any(f.completed for f in after) and all(f.completed for f in p.bad[: p.fault.start])
    ticks = [t for f in after for t in f.ticks]
    peers = others(p)
    assert all(t.aicore_pct[p.ranks].max() == 0.0 and t.aicore_pct[peers].min() > 90 for t in ticks)
    if p.fault.kind == "dead_host":
        assert not any(t.reporting[p.ranks].any() for t in ticks)


def _flapping_link(p: Pair) -> None:
    i = p.kind("allreduce/dp")
    calls = np.array([longest_transfer(p.bad[s])[i, p.ranks].mean() for s in p.window])
    assert calls.max() / calls.min() > 2.5  # ×3 on, ×1 off


def _flapping_link_periodic(p: Pair) -> None:
    """Down for `flap_steps` every `every_steps`, by `comm_factor`; up (as healthy) in between."""
    i, m = p.kind("allreduce/dp"), p.fault.magnitude
    down = {s for s in p.window if (s - p.fault.start) % int(m["every_steps"]) < int(m["flap_steps"])}
    ratio = {s: longest_transfer(p.bad[s])[i, p.ranks].mean() / longest_transfer(p.good[s])[i, p.ranks].mean()
             for s in p.window}
    assert down and all(ratio[s] == pytest.approx(m["comm_factor"], rel=0.1) for s in down)
    assert all(ratio[s] == pytest.approx(1.0, rel=0.1) for s in set(p.window) - down)


def _slow_pp_stage(p: Pair) -> None:
    stage = p.job.topology.coord_arrays["pp"]
    same = [r for r in others(p) if stage[r] != p.fault.stage]
    assert p.phase(p.bad, "forward_ms") > 1.15 * p.phase(p.good, "forward_ms")  # compute ×1.3 (+ TP comm as was)
    assert same == [] or p.phase(p.bad, "forward_ms", same) == pytest.approx(p.phase(p.good, "forward_ms", same),
                                                                             rel=0.05)


def _step_time_shift(p: Pair) -> None:
    before = np.array([f.duration_ms for f in p.bad[10: p.fault.start]])
    after = np.array([f.duration_ms for f in p.bad[p.fault.start + 1:] if f.step % 50])
    assert np.median(after) > 1.15 * np.median(before)
    assert p.fault.end is None  # a new normal, to the end of the run


CHECKS: dict[str, Callable[[Pair], None]] = {
    "unstable_power": _unstable_power, "cooling_loss": _cooling_loss, "chip_degradation": _chip_degradation,
    "memory_bottleneck": _memory_bottleneck, "link_degradation": _link_degradation,
    "slow_attention": _slow_attention, "redundant_grad": _redundant_grad,
    "memory_mismanagement": _memory_mismanagement, "gc_leak": _gc_leak, "moe_imbalance": _moe_imbalance,
    "compile_defect": _compile_defect, "bad_data_format": _bad_data_format, "heavy_preprocessing": _interstep,
    "bad_batch_size": _bad_batch_size, "cache_failure": _cache_failure,
    "unbalanced_scheduling": _unbalanced_scheduling, "wrong_dp_topology": _wrong_dp_topology,
    "early_stream_sync": _early_stream_sync, "uncompressed_gradients": _uncompressed_gradients,
    "cpu_device_mismatch": _cpu_device_mismatch, "interstep_cpu_work": _interstep,
    "minority_kernels": _minority_kernels, "timing_conflicts": _timing_conflicts,
    "hermes_gc_moe": _hermes_gc_moe, "gc_scatter": _gc_scatter, "gc_scatter_sparse": _gc_scatter,
    "gc_scatter_dense": _gc_scatter, "hermes_foreign_process": _hermes_foreign_process,
    "hermes_bad_links": _hermes_bad_links, "slow_rank": _slow_compute_one, "slow_data_rank": _slow_data_rank,
    "bursty_rank": _bursty_rank, "hung_rank": _hung,
    "dead_host": _hung, "slow_host": _slow_compute_one, "flapping_link": _flapping_link,
    "flapping_link_periodic": _flapping_link_periodic, "flapping_link_brief": _flapping_link_periodic,
    "slow_pp_stage": _slow_pp_stage, "step_time_shift": _step_time_shift,
    "memory_leak_slow": _memory_leak, "memory_leak": _memory_leak, "memory_leak_sawtooth": _memory_leak,
    "memory_leak_fast": _memory_leak, "allocator_fragmentation": _allocator_fragmentation,
    "allocator_fragmentation_slow": _allocator_fragmentation,
}


def test_every_scenario_has_a_check() -> None:
    # job attempts have their own checks (test_attempts.py): one FleetJob per launch; jobs below the fleet from
    # their start, alone or as a fleet, theirs (test_expected_scenarios.py): no healthy twin differs from them
    # but the hardware; a checkpoint slower than its past theirs (below): its rhythm needs a longer run
    assert set(CHECKS) == {name for name, sc in SCENARIOS.items()
                           if sc.layer not in ("healthy", "attempts", "expected", "drift", "rhythm")}
    spec_rows = {s.name for s in SCENARIOS.values() if s.layer in ("hardware", "code", "data", "deploy")}
    assert len(spec_rows) == 23  # every row of spec §4
    assert len([s for s in SCENARIOS.values() if s.layer == "hermes"]) == 3


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_fault_moves_the_metrics_the_spec_names(name: str) -> None:
    p = pair(name)
    assert p.fault.rules == SCENARIOS[name].rules and p.fault.scope in ("rank", "host", "group", "link", "stage", "job")
    assert set(p.fault.rules) <= set(RULE_IDS)
    CHECKS[name](p)


@pytest.mark.parametrize("name", ["slow_rank", "slow_host", "link_degradation"])
def test_same_scenario_and_seed_same_faults(name: str) -> None:
    sc = SCENARIOS[name]
    topo = layout(64)
    assert build_faults(sc, topo, STEPS, 1) == build_faults(sc, topo, STEPS, 1)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_faulty_events_stay_in_contract(name: str) -> None:
    p = pair(name)
    enc = FrameEncoder(p.job)
    frame = p.bad[min(p.fault.start + 2, STEPS - 1)]
    events = list(enc.encode(frame))
    assert events or not frame.completed
    for ev in events[:: max(1, len(events) // 40)]:
        decoded = decode(ev.value)
        assert ev.kind == type(decoded).TYPE


@pytest.mark.parametrize("name", sorted(n for n, sc in SCENARIOS.items() if sc.layer == "rhythm"))
def test_a_slowed_checkpoint_storage_lengthens_every_checkpoint_from_its_start_and_nothing_else(name: str) -> None:
    sc = SCENARIOS[name]
    topo = sc.topology(64)
    faults = build_faults(sc, topo, 120, SEED)
    quiet = Traits().without(["variable_length", "heavy_tail"])
    noise = sc.noise()
    assert noise is not None and noise.checkpoint_every
    bad = list(FleetJob("bad", topo, 120, faults, SEED, model=sc.model(topo), noise=noise, traits=quiet).iter_frames())
    good = list(FleetJob("good", topo, 120, (), SEED, model=sc.model(topo), noise=noise, traits=quiet).iter_frames())
    start, factor = faults[0].start, faults[0].magnitude["checkpoint_factor"]
    assert start % noise.checkpoint_every == 0 and start >= 2 * noise.checkpoint_every  # its rhythm shown twice

    base = float(np.median([np.median(f.phases["interstep_cpu_ms"]) for f in good]))  # a step without one

    def cost(frames: list[StepFrame], first: int) -> float:
        """The checkpoint's inter-step time from `first` until the next one (its copy, then its write's toll)."""
        return float(sum(np.median(frames[s].phases["interstep_cpu_ms"]) - base
                         for s in range(first, min(first + noise.checkpoint_every, 120))))

    for at in range(noise.checkpoint_every, 120, noise.checkpoint_every):
        ratio = cost(bad, at) / cost(good, at)
        assert ratio == pytest.approx(1.0 if at < start else factor, rel=0.15), at
    others = [s for s in range(120) if s % noise.checkpoint_every and s < start]
    assert all(bad[s].duration_ms == pytest.approx(good[s].duration_ms) for s in others)
