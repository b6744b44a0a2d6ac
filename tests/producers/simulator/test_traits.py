"""The real-cluster traits beyond collective waits (producers.simulator.traits): each does what
docs/scenarios.md says, and turning it off gives the earlier ruler's numbers."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from producers.simulator import fleet
from producers.simulator.catalogue import layout
from producers.simulator.events import FrameEncoder
from producers.simulator.fleet import STALL_PHASES, FleetJob, StepFrame, heavy_tail_stalls
from producers.simulator.traits import HEAVY_TAIL_CAP_MS, HEAVY_TAIL_MIN_MS, HEAVY_TAIL_P, Traits

STEPS = 60


def _frames(traits: Traits, steps: int = STEPS, seed: int = 3) -> tuple[FleetJob, list[StepFrame]]:
    job = FleetJob("t", layout(64), steps, seed=seed, traits=traits)
    return job, list(job.iter_frames())[job.noise.warmup_steps:]


def test_variable_length_moves_the_slowest_replica_and_the_tokens_it_reports() -> None:
    job, frames = _frames(Traits().without(["heavy_tail", "clock_offset"]))
    replica = job.topology.coord_arrays["dp"]
    f1 = job.plan.kind_index["F1:1x8x128x4096x4096"]
    slowest = {int(replica[np.argmax(f.k_total_ns[f1])]) for f in frames}
    assert len(slowest) >= job.topology.dp // 2  # the straggler moves
    mul = np.array([f.tokens_mul for f in frames])
    assert mul.min() >= 0.8 and mul.max() <= 1.2 and 0.02 < mul.std() < 0.08
    for f in frames[:3]:  # every rank of a replica carries the same tokens
        assert all(np.ptp(f.tokens_mul[replica == d]) == 0 for d in range(job.topology.dp))
    step = next(orjson.loads(e.value) for e in FrameEncoder(job).encode(frames[0]) if e.kind == "step")
    assert step["tokens"] == round(FrameEncoder(job)._tokens * frames[0].tokens_mul[0])
    _, plain = _frames(Traits().without(["variable_length", "heavy_tail", "clock_offset"]))
    assert plain[0].tokens_mul is None


def test_heavy_tail_stalls_are_rare_and_long_tailed() -> None:
    rng = np.random.default_rng(0)
    draws = [heavy_tail_stalls(rng, 1000) for _ in range(500)]
    lost = np.concatenate([sum(d.values()) for d in draws])
    hits = lost[lost > 0]
    assert hits.size / lost.size == pytest.approx(HEAVY_TAIL_P, rel=0.1)
    assert hits.min() >= HEAVY_TAIL_MIN_MS and hits.max() <= HEAVY_TAIL_CAP_MS
    assert np.mean(hits > 10 * HEAVY_TAIL_MIN_MS) > 0.01  # a tail, not a bump: a few % are 150 ms and more
    assert all(np.count_nonzero([d[p] for p in STALL_PHASES], axis=0).max() <= 1 for d in draws[:20])  # one phase


def test_heavy_tail_stalls_reach_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "HEAVY_TAIL_P", 0.1)  # frequent enough to measure in a short run
    cpu = [np.mean([f.phases["data_ms"] + f.phases["interstep_cpu_ms"] for f in frames])
           for frames in (_frames(Traits().without(["heavy_tail"]), steps=50)[1], _frames(Traits(), steps=50)[1])]
    assert cpu[1] > cpu[0] + 1.5  # ≈ 0.1 × 2/3 × 40 ms added per rank-step


def test_clock_offset_is_per_host_and_shifts_every_timestamp() -> None:
    job, frames = _frames(Traits(), steps=8)
    off = job.clock_offset_ns
    hosts = job.topology.host_ids
    assert all(np.ptp(off[hosts == h]) == 0 for h in range(job.topology.hosts))
    assert 0 < np.abs(off).max() < 50_000_000
    events = [orjson.loads(e.value) for e in FrameEncoder(job).encode(frames[-1])]
    step = next(e for e in events if e["type"] == "step" and e["rank"] == 9)
    assert step["start_ns"] - frames[-1].start_ns == off[9]
    sample = next(e for e in events if e["type"] == "device" and e["rank"] == 9)
    phase = job.sampler_phase_ns
    assert sample["ts_ns"] - frames[-1].ticks[0].ts_ns == off[9] + phase[9]  # its own clock, its own phase
    assert all(np.ptp(phase[hosts == h]) == 0 for h in range(job.topology.hosts))
    assert phase.min() >= 0 and phase.max() < 10**9 and np.unique(phase).size > 1
    plain = FleetJob("t", layout(64), 2, traits=Traits().without(["clock_offset"]))
    assert not plain.clock_offset_ns.any() and not plain.sampler_phase_ns.any()
