"""The fleet simulator: healthy jitter as documented, synchronisation as in real training,
plausible MFU, determinism, and the 10,240-rank layout (groups, contract, bytes per rank-step)."""

from __future__ import annotations

import numpy as np
import pytest

from producers.simulator.catalogue import SCENARIOS, build_faults, layout
from producers.simulator.events import FrameEncoder, bytes_per_rank_step
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.ground_truth import read_ground_truth, write_ground_truth
from producers.simulator.model import INTER_HOST, ModelConfig
from producers.simulator.traits import Traits
from schemas import DeviceSample, KernelSummary, StepEvent, decode

# docs/scenarios.md, "Bytes per rank-step" (steady state, 10,240 ranks)
DOCUMENTED_BYTES = {"step": 663, "kernel_summary": 2744, "device_sample": 270}
BUDGET = 4096


@pytest.mark.parametrize("jitter", [0.03, 0.08])
def test_healthy_runs_carry_their_documented_jitter(jitter: float) -> None:
    # Noise's own jitter: the traits that add variation of their own are off (tests/producers/simulator/test_traits.py)
    job = FleetJob("h", layout(64), 40, seed=5, noise=Noise(jitter=jitter),
                   traits=Traits().without(["variable_length", "heavy_tail"]))
    frames = list(job.iter_frames())[job.noise.warmup_steps:]
    i = job.plan.kind_index["F1:1x8x128x4096x4096"]
    per_call = np.array([f.k_total_ns[i] / f.k_count[i] for f in frames])  # steps × ranks
    cv = (per_call.std(axis=1) / per_call.mean(axis=1)).mean()  # across ranks inside a step
    assert cv == pytest.approx(jitter, rel=0.2)
    data_cv = np.mean([f.phases["data_ms"].std() / f.phases["data_ms"].mean() for f in frames])
    assert data_cv >= jitter * 0.8  # plus hiccups
    steps = np.array([f.duration_ms for f in frames if f.step % 50])
    assert 0.0 < steps.std() / steps.mean() < 0.1


def test_healthy_noise_has_warmup_checkpoints_eval_and_pauses() -> None:
    job = FleetJob("h", layout(64), 102, seed=2)
    d = np.array([f.duration_ms for f in job.iter_frames()])
    base = np.median(d[10:])
    assert d[0] > 2.5 * base and d[job.noise.warmup_steps + 1] < 1.2 * base  # warm-up
    assert d[50] > 1.15 * base and d[100] > base + 0.9 * job.noise.checkpoint_ms  # eval, checkpoint
    frames = list(job.iter_frames())
    gc = np.array([f.phases["gc_ms"] for f in frames])
    assert 0.005 < (gc > 5).mean() < 0.05  # normal-sized GC pauses on a few rank-steps


def test_synchronisation_late_arriver_waits_least() -> None:
    sc = SCENARIOS["slow_rank"]
    topo = layout(64)
    fault = build_faults(sc, topo, 60, 1)[0]
    job = FleetJob("s", topo, 60, [fault], 1)
    slow = fault.ranks[0]
    for f in list(job.iter_frames())[fault.start: fault.start + 5]:
        busy = f.busy_ms
        assert int(np.argmax(busy)) == slow
        assert int(np.argmin(f.phases["comm_exposed_ms"])) == slow  # the late arriver shows the shortest wait
        assert np.allclose(busy + f.phases["comm_exposed_ms"], f.duration_ms)  # collectives end together
        tp = job.plan.kind_index["allreduce/tp"]
        peers = job.topology.group_ids["tp"] == job.topology.group_ids["tp"][slow]
        assert f.k_total_ns[tp, slow] == f.k_total_ns[tp, peers].min()  # its collectives are the shortest
        dp = job.plan.kind_index["allreduce/dp"]
        assert f.k_total_ns[dp, slow] < np.median(f.k_total_ns[dp])


def test_mfu_bubbles_and_stage_imbalance_are_plausible() -> None:
    for ranks, moe in ((64, False), (64, True), (1024, False)):
        sc_model = ModelConfig(name="m", layers=16, experts=8, ffn=4096) if moe else ModelConfig()
        job = FleetJob("m", layout(ranks, moe=moe), 12, seed=1, model=sc_model)
        f = list(job.iter_frames())[-1]
        mfu = job.plan.model_flops_per_rank / (f.duration_ms / 1e3) / job.hardware.peak_flops
        assert 0.30 <= mfu <= 0.55, (ranks, moe, mfu)
    stage = job.topology.coord_arrays["pp"]
    last = stage == stage.max()
    assert f.busy_ms[last].mean() > f.busy_ms[~last].mean()  # the LM head stage is the heaviest
    assert f.phases["comm_exposed_ms"][~last].mean() > f.phases["comm_exposed_ms"][last].mean()  # others wait


def test_collective_latency_has_three_regions() -> None:
    link = INTER_HOST
    assert link.time_ns(1e3) == link.time_ns(link.m1)  # constant latency
    big = link.time_ns(1e9)
    assert big == pytest.approx(link.t_s_us * 1e3 + 1e9 / link.bw_gbps)  # t_s + m / BW
    mid = link.time_ns(np.sqrt(link.m1 * link.m2))
    assert link.time_ns(link.m1) < mid < link.t_s_us * 1e3 + np.sqrt(link.m1 * link.m2) / link.bw_gbps


def test_same_seed_same_bytes() -> None:
    def run(seed: int) -> list[bytes]:
        job = FleetJob("d", layout(64), 4, build_faults(SCENARIOS["gc_leak"], layout(64), 4, seed), seed)
        enc = FrameEncoder(job)
        return [e.value for f in job.iter_frames() for e in enc.encode(f)]
    assert run(1) == run(1) and run(1) != run(2)


def test_ground_truth_is_jsonl_one_fault_per_line(tmp_path: object) -> None:
    from pathlib import Path
    topo = layout(64)
    faults = build_faults(SCENARIOS["hermes_bad_links"], topo, 90, 0) + build_faults(SCENARIOS["slow_host"], topo,
                                                                                       90, 0)
    path = write_ground_truth(Path(str(tmp_path)) / "gt.jsonl", faults, "j", 0, 90)
    lines = read_ground_truth(path)
    assert len(lines) == 2 == len(path.read_text().splitlines())
    assert lines[1]["scope"] == "host" and lines[1]["rules"] == ["SLOW_HOST"] and len(lines[1]["ranks"]) == 8
    assert lines[0]["links"] and lines[0]["end_step"] >= lines[0]["start_step"]


@pytest.fixture(scope="module")
def big() -> FleetJob:
    return FleetJob("job-fleet", layout(10240), 8, seed=1)


def test_10240_rank_layout_has_one_group_per_domain_with_the_right_sizes(big: FleetJob) -> None:
    topo = big.topology
    assert topo.world == 10240 and topo.devices_per_host == 16
    for domain, gids in topo.group_ids.items():
        size = topo.domain_size(domain)
        counts = np.bincount(gids)
        assert len(gids) == topo.world and (counts == size).all()  # every rank in exactly one group of its size
        idx = topo.group_index[domain]
        order = np.lexsort((idx, gids))
        assert (idx[order] == np.tile(np.arange(size), topo.world // size)).all()  # indexes 0..size-1 per group
    assert not topo.spans_hosts("tp") and topo.spans_hosts("dp")
    for r in (0, 5121, 10239):
        doms = topo.domains(r)
        assert {d: (v.group, v.size, v.index) for d, v in doms.items()} == {
            d: (int(topo.group_ids[d][r]), topo.domain_size(d), int(topo.group_index[d][r])) for d in topo.group_ids}


def test_10240_rank_events_validate_and_fit_the_byte_budget(big: FleetJob) -> None:
    enc = FrameEncoder(big)
    frame = next(f for f in reversed(list(big.iter_frames())) if f.ticks)  # a step with a device tick
    events = list(enc.encode(frame))
    rng = np.random.default_rng(0)
    by_kind = {k: [e for e in events if e.kind == k] for k in ("step", "kernel_summary", "device")}
    assert len(by_kind["step"]) == len(by_kind["kernel_summary"]) == 10240
    for kind, cls in (("step", StepEvent), ("kernel_summary", KernelSummary), ("device", DeviceSample)):
        for n in rng.choice(len(by_kind[kind]), size=200, replace=False):
            assert isinstance(decode(by_kind[kind][int(n)].value), cls)
    measured = bytes_per_rank_step(big, 3)
    assert measured["total"] <= BUDGET and measured["total_at_1_step_per_s"] <= BUDGET
    steps_s = np.mean([f.duration_ms for f in list(big.iter_frames())[big.noise.warmup_steps:]]) / 1e3
    assert measured["device_samples_per_rank_step"] == pytest.approx(steps_s, rel=0.5)  # 1 Hz
    for kind, documented in DOCUMENTED_BYTES.items():
        assert measured[kind] == pytest.approx(documented, rel=0.1), kind


def test_the_simulated_busy_phases_are_contract_phases() -> None:
    from producers.simulator.model import BUSY_PHASES
    from schemas.columns import PHASES

    assert set(BUSY_PHASES) <= set(PHASES) and len(set(BUSY_PHASES)) == len(BUSY_PHASES)
