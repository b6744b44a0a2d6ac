"""Device memory in the simulator (issue #44): each job's own steady level, a per-step sawtooth, and a leak's
bytes per step that end the job out of memory when they reach the device's capacity."""

from __future__ import annotations

import numpy as np

from producers.simulator.catalogue import SCENARIOS, build_faults, leak_pct, scenario_job
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology


def _mem(job: FleetJob) -> np.ndarray:
    """[ticks, devices] memory % over the run."""
    return np.array([t.mem_pct for f in job.iter_frames() for t in f.ticks])


def test_default_levels_are_the_simulator_s_as_before() -> None:
    """The levels come from the timing model's first draw, kept in its stream: every other number is unchanged."""
    job = FleetJob("j", Topology(dp=4, tp=2, pp=1), 30, seed=5)
    u = np.random.default_rng(5).random(job.world)
    assert np.allclose(job.mem_levels, 68.0 + 6.0 * u)
    assert np.allclose(_mem(job).mean(axis=0), job.mem_levels, atol=0.2)


def test_a_job_keeps_its_own_steady_level() -> None:
    job = scenario_job("healthy_full_memory", ranks=16, steps=150, seed=1)
    mem = _mem(job)
    assert mem.mean(axis=0).min() >= 95.0 and mem.mean(axis=0).max() <= 97.0
    first, last = mem[20:60].mean(axis=0), mem[-40:].mean(axis=0)
    assert np.abs(last - first).max() < 0.3, "steady: no growth"
    assert job.crash_step is None and job.oom_step is None


def test_a_sawtooth_rises_through_each_step_and_falls_at_its_end() -> None:
    job = FleetJob("saw", Topology(dp=8, tp=1, pp=1), 60, seed=2,
                   noise=Noise(mem_level_pct=80.0, mem_spread_pct=0.0, mem_sawtooth_pct=10.0))
    rises = []
    for f in job.iter_frames():
        for t in f.ticks:
            rises.append((t.ts_ns - f.start_ns) / (f.end_ns - f.start_ns) * 10.0)
    mem = _mem(job)
    assert np.allclose(mem.mean(axis=1), 80.0 + np.array(rises), atol=0.6)  # 8 devices of 0.3 % noise
    assert mem.max() - mem.min() > 6.0 and job.oom_step is None


def test_a_leak_grows_its_bytes_per_step_until_the_device_is_full_then_the_job_stops() -> None:
    sc = SCENARIOS["memory_leak_fast"]
    topo = sc.topology(16)
    faults = build_faults(sc, topo, 200, 0)
    leak = faults[0]
    job = FleetJob("leak", topo, 200, faults, 0, model=sc.model(topo), noise=sc.noise())
    rank = leak.ranks[0]
    assert abs(leak_pct(leak) - 0.3) < 1e-9
    frames = list(job.iter_frames())
    assert job.oom_step == job.crash_step == int(leak.magnitude["oom_step"])
    assert frames[-1].step == job.oom_step - 1, "no step from the out-of-memory one on"
    level = job.mem_levels[rank]
    last = frames[-1]
    assert level + leak_pct(leak) * (last.step - leak.start) < 100.0 <= level + leak_pct(leak) * (
        job.oom_step - leak.start)
    others = [r for r in range(job.world) if r != rank]
    assert np.abs(last.ticks[-1].mem_pct[others] - job.mem_levels[others]).max() < 1.5
    # a run that stops before the device fills up has no crash, its ground truth still names the step
    short = FleetJob("leak", topo, 120, build_faults(sc, topo, 120, 0), 0, model=sc.model(topo), noise=sc.noise())
    assert short.crash_step is None and short.faults[0].to_dict()["magnitude"]["oom_step"] == job.oom_step
