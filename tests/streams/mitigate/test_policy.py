"""The act-or-wait policy (pure): what it drains, when, and the figures each decision records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schemas import Incident
from streams.advice import advise
from streams.mitigate.policy import JobCosts, PolicyParams, decide, drainable, expected_remaining_s, slowdown_of

S = 1_000_000_000
PARAMS = PolicyParams()
# a 1,024-GPU job that checkpointed 10 min ago and relaunches in 5 min
COSTS = JobCosts(job_gpus=1024, since_checkpoint_s=600.0, relaunch_s=300.0, node_gpus=8)


def slow_host(**kw: object) -> Incident:
    base = Incident(incident_id="i1", job="j", rule="SLOW_HOST", state="open", severity="warning", scope="host",
                    summary="slow host", detected_ns=0, host="node-7", observed=1.25, expected=1.0,
                    cause=advise("backward_ms").cause)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_node_fault_is_drainable_but_a_data_loader_gc_leak_or_group_imbalance_is_not() -> None:
    assert drainable(slow_host()) is None
    assert drainable(slow_host(rule="SLOW_LINK", scope="link")) is None
    assert "follows the job" in str(drainable(slow_host(cause=advise("data_ms").cause)))
    assert "follows the job" in str(drainable(slow_host(cause=advise("gc_ms").cause)))
    assert "not a node's fault" in str(drainable(slow_host(rule="OOM", scope="device")))
    assert "not a node's fault" in str(drainable(slow_host(rule="SLOW_GROUP", scope="group")))
    assert "names no host" in str(drainable(slow_host(host=None)))


def test_slowdown_is_the_share_of_throughput_lost() -> None:
    assert slowdown_of(slow_host()) == pytest.approx(0.2)  # 1.25 s instead of 1.0 s: 20 % of the work lost
    assert slowdown_of(slow_host(rule="HUNG_HOST")) == 1.0
    assert slowdown_of(slow_host(observed=None)) == 0.0


def test_slowdown_reads_the_culprits_busy_time_and_an_efficiency_the_right_way_up() -> None:
    """As the detector reports a slow host (bench/mitigation.py runs it): R4 with the kernels' efficiency
    against their benchmark (0.91 of 1.01: lower is worse), and the culprit's busy time against its group's."""
    r4 = slow_host(rule="R4", observed=0.906, expected=1.01, unit=None)
    assert slowdown_of(r4) == pytest.approx(1 - 0.906 / 1.01)
    paced = replace(r4, evidence={"busy_ms": 1342.2, "group_median_ms": 1192.4})
    assert slowdown_of(paced) == pytest.approx(1 - 1192.4 / 1342.2)  # the job runs at its slowest member's pace


def test_mean_residual_life_from_history_and_the_prior_without_enough() -> None:
    durations = [60.0] * 50 + [7200.0] * 10  # most faults of the class end within a minute; some last 2 h
    remaining, n = expected_remaining_s(durations, 30.0, PARAMS)
    assert n == 60 and remaining == pytest.approx((50 * 30 + 10 * 7170) / 60)
    remaining, n = expected_remaining_s(durations, 120.0, PARAMS)  # past a minute, it is one of the long ones
    assert n == 10 and remaining == pytest.approx(7080.0)
    assert expected_remaining_s(durations[:3], 0.0, PARAMS) == (PARAMS.prior_remaining_s, 3)


def test_a_young_fault_is_profiled_and_a_software_one_only_notified() -> None:
    assert decide(slow_host(), COSTS, [], 60 * S, PARAMS).level == "profile"
    notified = decide(slow_host(cause=advise("data_ms").cause), COSTS, [], 3600 * S, PARAMS)
    assert notified.level == "notify" and "follows the job" in notified.reason


def test_nothing_is_done_before_the_faults_break_even_whatever_the_history() -> None:
    """(10 min since the checkpoint + 5 min relaunch) / 20 % = 4,500 s: a fault that ended before it cost the
    job less than a relaunch would have, so a class of long faults does not make a young one worth acting on."""
    d = decide(slow_host(), COSTS, [4 * 3600.0] * 10, 4400 * S, PARAMS)
    assert d.level == "profile" and "break-even (4500 s)" in d.reason


def test_a_persistent_fault_on_a_large_job_relaunches_without_the_node() -> None:
    # no history: the prior (1 h) x 20 % x 1,024 GPUs = 205 GPU-h of waiting vs 256 + 8 GPU-h of relaunching:
    # not yet, drain only; with a history of 4-hour faults, past its break-even: 2 h 43 more expected, relaunch
    d = decide(slow_host(), COSTS, [], 4600 * S, PARAMS)
    assert d.level == "drain" and d.keep_cost_gpu_h == pytest.approx(0.2 * 1024 * 3600 / 3600)
    long_faults = [4 * 3600.0] * 10
    d = decide(slow_host(), COSTS, long_faults, 4600 * S, PARAMS)
    assert d.level == "relaunch" and "expected to cost more" in d.reason
    assert d.keep_cost_gpu_h > d.act_cost_gpu_h and d.history_n == 10


def test_a_class_of_short_faults_is_waited_out_until_the_loss_paid_equals_the_cost_of_acting() -> None:
    short = [180.0] * 100  # this class ends after 3 min
    d = decide(slow_host(), COSTS, short, 150 * S, PARAMS)
    assert d.level == "profile" and d.expected_remaining_s == pytest.approx(30.0)
    # the history was wrong about this one: it goes on; the loss paid reaches the cost of acting -> act anyway
    hours = 0.2 * 1024 / 3600
    break_even_s = (1024 * 900 + 8 * PARAMS.prior_remaining_s) / 3600 / hours
    d = decide(slow_host(), COSTS, short, int((break_even_s + 60) * S), PARAMS)
    assert d.level == "relaunch" and "ski rental" in d.reason and d.lost_so_far_gpu_h >= d.act_cost_gpu_h


def test_a_small_job_drains_the_node_but_does_not_relaunch_for_a_small_slowdown() -> None:
    small = JobCosts(job_gpus=16, since_checkpoint_s=1800.0, relaunch_s=600.0, node_gpus=8)
    d = decide(slow_host(observed=1.05), small, [4 * 3600.0] * 10, 51_000 * S, PARAMS)  # break-even 50,400 s
    assert d.level == "drain" and d.keep_cost_gpu_h < d.act_cost_gpu_h
