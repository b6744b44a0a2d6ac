"""Graded confirmation (streams/detect/scopes/confirm.py): the policy on hand-built evidence, then in the engine."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from schemas import Domain, Phases, StepEvent, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch
from streams.detect.scopes.confirm import Deviation, compute_share, host_open_after, is_strong, open_after
from tests.streams.helpers import T0, incidents

CFG = DetectionConfig()
N8_CRIT = 0.633  # Dixon's 99.5 % critical value for n = 8 (streams/detect/scopes/outliers.py)


def strong_dev(cfg: DetectionConfig = CFG, **kw: float) -> Deviation:
    """Evidence just past every strong threshold of `cfg` (n = 8), overridable per field."""
    values = {"z": cfg.slow_rank_strong_z + 0.5, "excess": cfg.slow_rank_strong_excess + 0.01,
              "dixon_q": N8_CRIT + (cfg.slow_rank_strong_q_margin + 0.05) * (1 - N8_CRIT), "dixon_crit": N8_CRIT,
              "compute_share": 1.0}
    values.update(kw)
    return Deviation(**values)


def test_far_past_every_threshold_confirms_in_fewer_steps() -> None:
    assert CFG.slow_rank_strong_min_steps < CFG.slow_rank_min_steps
    assert open_after([strong_dev()], CFG) == CFG.slow_rank_strong_min_steps


def test_each_condition_alone_falls_back_to_full_persistence() -> None:
    weak = [
        strong_dev(z=CFG.slow_rank_strong_z - 0.5),
        strong_dev(excess=CFG.slow_rank_strong_excess - 0.01),
        strong_dev(dixon_q=N8_CRIT + 0.01),  # past the critical value, but not by the margin
        strong_dev(compute_share=CFG.slow_rank_strong_compute_share - 0.05),  # a hiccup or GC pause
    ]
    for dev in weak:
        assert not is_strong(dev, CFG), dev
        assert open_after([dev], CFG) == CFG.slow_rank_min_steps, dev


def test_no_evidence_or_grading_off_keeps_the_full_persistence() -> None:
    assert open_after([], CFG) == CFG.slow_rank_min_steps  # e.g. a sustained straggler over a window
    off = replace(CFG, slow_rank_strong_min_steps=CFG.slow_rank_min_steps + 2)
    assert open_after([strong_dev(off)], off) == off.slow_rank_min_steps


def test_strong_in_any_domain_is_strong() -> None:
    assert open_after([strong_dev(z=1.0), strong_dev()], CFG) == CFG.slow_rank_strong_min_steps


def test_large_groups_have_no_dixon_verdict_and_small_ones_can_still_pass() -> None:
    assert is_strong(strong_dev(dixon_q=0.0, dixon_crit=float("nan")), CFG)
    crit4 = 0.921  # n = 4: a fixed margin of 0.1 would be unreachable (Q <= 1)
    assert is_strong(strong_dev(dixon_q=0.99, dixon_crit=crit4), CFG)
    assert not is_strong(strong_dev(dixon_q=0.93, dixon_crit=crit4), CFG)


def test_host_needs_half_of_its_flagged_ranks_strong_and_ignores_dixon() -> None:
    not_max = strong_dev(dixon_q=0.0)  # a host's ranks share groups: most of them are not their group's latest
    weak = strong_dev(z=1.0, dixon_q=0.0)
    assert host_open_after([[not_max], [not_max], [weak]], CFG) == CFG.slow_rank_strong_min_steps
    assert host_open_after([[not_max], [weak], [weak]], CFG) == CFG.slow_rank_min_steps
    assert host_open_after([], CFG) == CFG.slow_rank_min_steps


def test_compute_share_counts_positive_excess_only() -> None:
    compute = ("forward_ms", "backward_ms")
    assert compute_share({"forward_ms": 30.0, "data_ms": 10.0, "gc_ms": -5.0}, compute) == 0.75
    assert compute_share({"forward_ms": -1.0, "data_ms": -2.0}, compute) == 0.0


# --- through the engine: the same straggler, once in compute, once as a data-loader stall ----------


def _step(rank: int, step: int, forward: float, data: float) -> StepEvent:
    busy = data + forward + 30.0 + 5.0
    return StepEvent(job="job-c", rank=rank, world=8, host="node-0", device=rank,
                     domains={"dp": Domain(group=0, size=8, index=rank)}, step=step, start_ns=T0 + step * 10**9,
                     end_ns=T0 + step * 10**9 + int((busy + 40.0) * 1e6),
                     phases=Phases(data_ms=data, forward_ms=forward, optimizer_ms=30.0, gc_ms=5.0,
                                   comm_exposed_ms=40.0))


def _open_step(phase: str, start: int = 20, steps: int = 40) -> int | None:
    """Feed a job step by step (rank 3 slow by 120 ms in `phase` from `start`); the step its incident opened at."""
    rng = np.random.default_rng(7)
    fleet = FleetEngine(CFG)
    now = T0
    for step in range(steps):
        raws = []
        for rank in range(8):
            forward, data = 335.0 * rng.lognormal(0, 0.02), 20.0
            if rank == 3 and step >= start:
                forward, data = (forward + 120.0, data) if phase == "forward" else (forward, data + 120.0)
            raws.append(encode(_step(rank, step, forward, data)))
        chunks, _ = decode_batch(raws, 1 << 20)
        now += 10**9
        out: list[object] = []
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 0, 0
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        if any(i.rule == "SLOW_RANK" and 3 in i.ranks for i in incidents(out, "open")):
            return step
    return None


def test_a_compute_straggler_opens_sooner_than_a_data_stall_of_the_same_size() -> None:
    assert _open_step("forward") == 20 + CFG.slow_rank_strong_min_steps - 1
    assert _open_step("data") == 20 + CFG.slow_rank_min_steps - 1
