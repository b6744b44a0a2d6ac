from schemas import Domain, Phases, StepEvent
from streams.records import DomainStep, GroupStep, busy_ms, domain_steps
from tests.streams.helpers import T0, step_event


def test_busy_is_duration_minus_exposed_comm() -> None:
    event = step_event(rank=1, step=0, busy=400.0, comm=60.0)
    assert abs(busy_ms(event) - 400.0) < 1e-6


def test_busy_falls_back_to_sum_of_phases_without_comm() -> None:
    event = StepEvent(job="j", rank=0, world=1, host="h", device=0, step=0, start_ns=T0, end_ns=T0 + 10**9,
                      phases=Phases(data_ms=10.0, forward_ms=100.0, backward_ms=200.0))
    assert busy_ms(event) == 310.0


def test_domain_steps_skip_pp_and_single_rank_domains() -> None:
    event = StepEvent(
        job="j", rank=5, world=16, host="h", device=5, step=3, start_ns=T0, end_ns=T0 + 1,
        domains={"dp": Domain(group=1, size=4, index=1), "tp": Domain(group=2, size=1, index=0),
                 "pp": Domain(group=0, size=4, index=2)},
    )
    records = domain_steps(event)
    assert [(r.domain, r.group, r.size) for r in records] == [("dp", 1, 4)]
    assert DomainStep.loads(records[0].dumps()) == records[0]


def test_group_step_round_trip() -> None:
    gs = GroupStep(job="j", domain="dp", group=0, size=2, world=2, step=1, reported=2, missing=0, start_ns=1,
                   end_ns=2, step_ms=3.0, busy_max_ms=2.0, busy_median_ms=1.5, busy_mean_ms=1.5, wait_ratio=0.25,
                   slowest_rank=1, slowest_host="h", slowest_z=4.0, flagged=False, slowest_excess_phase=None,
                   phase_max={"gc_ms": 1.0}, phase_mean={"gc_ms": 0.5})
    import orjson
    assert GroupStep.from_dict(orjson.loads(gs.dumps())) == gs
