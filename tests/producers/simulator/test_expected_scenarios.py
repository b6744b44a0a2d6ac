"""Jobs below the fleet from their first step (issue #44): the simulator models them physically."""

from __future__ import annotations

import numpy as np
import pytest

from producers.simulator.catalogue import SCENARIOS, scenario_job
from producers.simulator.fleet import FleetJob
from producers.simulator.model import INTER_HOST, TCP_SOCKETS
from schemas.incident import RULE_IDS

EXPECTED = sorted(name for name, sc in SCENARIOS.items() if sc.layer == "expected")


def _twin(job: FleetJob) -> FleetJob:
    """The same job on healthy hardware (no fault)."""
    return FleetJob(job.job_id, job.topology, job.steps, (), job.seed, model=job.model, noise=job.noise)


def test_scenarios_are_job_faults_from_step_zero() -> None:
    assert {"socket_fallback", "socket_fallback_256", "compute_downclock", "compute_downclock_256"} <= set(EXPECTED)
    sizes = set()
    for name in EXPECTED:
        job = scenario_job(name, steps=20)
        sizes.add(job.world)
        (fault,) = job.faults
        assert fault.scope == "job" and fault.start == 0 and fault.end is None and fault.rules == ("BELOW_EXPECTED",)
        assert set(fault.rules) <= set(RULE_IDS) and len(fault.ranks) == job.world
    assert sizes == {64, 256}


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("socket")])
def test_socket_fallback_slows_only_inter_host_collectives(name: str) -> None:
    job = scenario_job(name, steps=20)
    twin = _twin(job)
    assert job.hardware.inter == TCP_SOCKETS and twin.hardware.inter == INTER_HOST
    for kind, healthy in zip(job.plan.kinds, twin.plan.kinds, strict=True):
        if healthy.link == "inter":  # on "tcp" now: a third of RDMA's bandwidth or less on the bytes the job moves
            assert kind.link == "tcp" and kind.bytes == healthy.bytes and kind.call_ns >= 2.5 * healthy.call_ns
        else:
            assert kind.call_ns == healthy.call_ns
    assert job.nominal_ms > twin.nominal_ms


def test_a_degraded_fabric_slows_only_inter_host_collectives_by_its_bandwidth() -> None:
    job = scenario_job("fleet_drift", steps=8)
    (fault,) = job.faults
    assert SCENARIOS["fleet_drift"].layer == "drift" and fault.kind == "fabric_degraded" and fault.start == 0
    twin = _twin(job)
    assert job.hardware.inter.bw_gbps == pytest.approx(0.4 * INTER_HOST.bw_gbps) and job.hardware.intra == \
        twin.hardware.intra
    slowed = 0
    for kind, healthy in zip(job.plan.kinds, twin.plan.kinds, strict=True):
        if healthy.link == "inter":  # the same link class, less bandwidth: latency-bound calls barely move
            assert kind.link == "inter" and healthy.call_ns <= kind.call_ns <= healthy.call_ns / 0.4 + 1
            slowed += kind.call_ns >= 2.0 * healthy.call_ns  # the bandwidth-bound ones >= 2x
        else:
            assert kind.call_ns == healthy.call_ns
    assert slowed and job.nominal_ms > twin.nominal_ms


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("compute")])
def test_downclock_lowers_the_clock_and_every_compute_kernel(name: str) -> None:
    job = scenario_job(name, steps=8)
    twin = _twin(job)
    for kind, healthy in zip(job.plan.kinds, twin.plan.kinds, strict=True):
        ratio = kind.call_ns / healthy.call_ns
        assert ratio == pytest.approx(1.25) if kind.cat == "compute" else ratio == pytest.approx(1.0)
    ticks = [t for f in job.iter_frames() for t in f.ticks]
    healthy_ticks = [t for f in twin.iter_frames() for t in f.ticks]
    assert np.allclose([t.freq_mhz for t in ticks], 0.8 * job.hardware.rated_mhz)
    assert np.allclose([t.freq_mhz for t in healthy_ticks], job.hardware.rated_mhz)
