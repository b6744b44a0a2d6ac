"""The collective-wait trait (producers/simulator/traits.py, waits.py): a collective kernel is the
rank's wait for its group's last arriver plus the transfer, for TP, CP, EP, PP and DP alike."""

from __future__ import annotations

import numpy as np
import pytest

from producers.simulator.catalogue import FaultSpec, layout
from producers.simulator.fleet import FleetJob, StepFrame
from producers.simulator.model import ModelConfig
from producers.simulator.topology import Topology
from producers.simulator.traits import Traits
from producers.simulator.waits import couple

LATE_SHARE = 0.3  # the late rank's data loader adds this share of a healthy step


def test_couple_follows_the_late_rank_along_tp_then_pp_then_dp() -> None:
    topo = Topology(dp=2, tp=2, pp=2)  # rank = (pp * dp + dp_idx) * tp + tp_idx
    arrival = np.zeros(8)
    arrival[1] = 5.0  # rank 1 (tp 1, dp 0, stage 0) is late
    waits, left = couple(arrival, topo.group_ids, ("tp", "pp", "dp"))
    assert waits["tp"].tolist() == [5, 0, 0, 0, 0, 0, 0, 0]  # its TP peer
    assert waits["pp"].tolist() == [0, 0, 0, 0, 5, 5, 0, 0]  # the next stage of its pipeline replica
    assert waits["dp"].tolist() == [0, 0, 5, 5, 0, 0, 5, 5]  # the other replica, for the one held up
    assert left.tolist() == [0.0] * 8


# the waits' mechanism alone: the other traits move the late arriver around (tested on their own)
WAIT_ONLY = Traits().without(["variable_length", "heavy_tail", "clock_offset"])



def _wait(on: bool) -> Traits:
    return WAIT_ONLY if on else WAIT_ONLY.without(["collective_wait"])


def _late_job(topo: Topology, model: ModelConfig, rank: int, traits: Traits) -> FleetJob:
    fault = FaultSpec(kind="slow_data_loader", scope="rank", start=8, end=None, ranks=(rank,),
                      magnitude={"data_add_share": LATE_SHARE}, rules=("SLOW_RANK",))
    return FleetJob("w", topo, 12, [fault], seed=3, model=model, traits=traits)


def _frame(job: FleetJob, step: int = 10) -> StepFrame:
    return list(job.iter_frames())[step]


CASES = {
    "dense": (layout(64), ModelConfig(microbatches=8), 33),
    "moe": (layout(64, moe=True), ModelConfig(name="moe", layers=16, experts=8, ffn=4096, microbatches=8), 21),
    "cp": (Topology(dp=4, tp=2, pp=2, cp=2), ModelConfig(microbatches=8), 13),
}
KINDS = {"allreduce/tp": "tp", "allgather/cp": "cp", "alltoall/ep": "ep", "recv/pp": "pp", "allreduce/dp": "dp"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_late_arriver_shows_the_transfer_its_peers_the_wait(case: str) -> None:
    topo, model, late = CASES[case]
    job = _late_job(topo, model, late, WAIT_ONLY)
    frame = _frame(job)
    lateness = LATE_SHARE * job.nominal_ms
    seen = set()
    for key, domain in KINDS.items():
        if key not in job.plan.kind_index:
            continue
        seen.add(domain)
        i = job.plan.kind_index[key]
        group = job.topology.group_ids[domain] == job.topology.group_ids[domain][late]
        kernels = frame.k_total_ns[i, group] / 1e6
        own = frame.k_total_ns[i, late] / 1e6
        assert own == pytest.approx(kernels.min(), abs=0.05 * kernels.min()), key  # ≈ the transfer alone
        if domain in ("tp", "cp", "ep"):  # its groups inside the stage wait the whole lateness for it
            assert kernels.max() - own > 0.8 * lateness, key
        if domain == "pp":  # the other stage of its replica too, less what the LM-head stage is late by itself
            assert kernels.max() - own > 0.5 * lateness, key
    assert seen >= {"tp", "pp", "dp"} | ({"ep"} if case == "moe" else set()) | ({"cp"} if case == "cp" else set())


def test_every_rank_waits_once_for_the_last_arrival() -> None:
    # the earlier ruler put a rank's whole wait for the job's last arrival into its TP and DP all-reduces;
    # the trait spreads the same wait over the collectives where it happens (plus the few ms its peers'
    # exposed transfers at the step's end hold it up), it does not count it twice
    topo, model, late = CASES["dense"]
    on, off = (_frame(_late_job(topo, model, late, _wait(w))) for w in (True, False))
    comm = [i for i, k in enumerate(_late_job(topo, model, late, WAIT_ONLY).plan.kinds) if k.cat == "comm"]
    moved = (on.k_total_ns[comm].sum(axis=0) - off.k_total_ns[comm].sum(axis=0)) / 1e6
    assert np.all(moved >= -1e-6) and np.all(moved < 0.02 * on.duration_ms)
    waits = on.duration_ms - on.busy_ms  # what every rank spends outside its own work
    assert waits[late] == waits.min()


def test_longest_call_carries_the_wait_too() -> None:
    topo, model, late = CASES["dense"]
    frame = _frame(_late_job(topo, model, late, WAIT_ONLY))
    i = _late_job(topo, model, late, WAIT_ONLY).plan.kind_index["allreduce/tp"]
    peers = np.flatnonzero(topo.group_ids["tp"] == topo.group_ids["tp"][late])
    assert frame.k_max_ns[i, late] == frame.k_max_ns[i, peers].min()
    assert frame.k_max_ns[i, peers].max() > 1.5 * frame.k_max_ns[i, late]


def test_off_is_the_earlier_ruler_pp_recv_without_waits() -> None:
    topo, model, late = CASES["dense"]
    on, off = (_frame(_late_job(topo, model, late, _wait(w))) for w in (True, False))
    job = _late_job(topo, model, late, WAIT_ONLY)
    recv = job.plan.kind_index["recv/pp"]
    pipeline = np.flatnonzero(topo.group_ids["pp"] == topo.group_ids["pp"][late])
    stage_peer = int(pipeline[pipeline != late][0])
    assert on.k_total_ns[recv, stage_peer] - off.k_total_ns[recv, stage_peer] > 0.8 * LATE_SHARE * job.nominal_ms * 1e6
    assert on.duration_ms == off.duration_ms  # the trait moves waits between kernels, not the step
    assert np.array_equal(on.phases["comm_exposed_ms"], off.phases["comm_exposed_ms"])


def test_traits_are_named_and_switched_by_name() -> None:
    assert Traits().to_dict() == {"collective_wait": True, "variable_length": True, "heavy_tail": True,
                                  "clock_offset": True, "allocator_stats": True}
    assert Traits().without(["collective_wait"]).collective_wait is False
    with pytest.raises(ValueError, match="unknown trait"):
        Traits().without(["colective_wait"])
