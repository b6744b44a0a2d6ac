from schemas import ControlCommand, Incident
from streams.analysis.slow_rank import SlowRankDetector
from streams.records import GroupStep


def gs(step: int, rank: int, flagged: bool, domain: str = "dp") -> GroupStep:
    return GroupStep(job="j", domain=domain, group=0, size=8, world=8, step=step, reported=8, missing=0, start_ns=1,
                     end_ns=2, step_ms=600.0, busy_max_ms=520.0, busy_median_ms=400.0, busy_mean_ms=415.0,
                     wait_ratio=0.2, slowest_rank=rank, slowest_host="node-0", slowest_z=30.0, flagged=flagged,
                     slowest_excess_phase="backward_ms", phase_max={}, phase_mean={})


def test_opens_after_min_steps_asks_for_profiling_and_resolves_when_it_stops() -> None:
    detector = SlowRankDetector("j", min_steps=3, resolve_after=2, profile_steps=5)
    out = []
    for step in range(6):
        out += detector.observe(gs(step, 5, True), now_ns=step)
        out += detector.observe(gs(step, 5, True, domain="tp"), now_ns=step)
        out += detector.advance(step, now_ns=step)
    incidents = [o for o in out if isinstance(o, Incident)]
    commands = [o for o in out if isinstance(o, ControlCommand)]
    assert [i.state for i in incidents] == ["open"]
    assert incidents[0].ranks == [5] and incidents[0].step_first == 0 and incidents[0].step_last == 2
    assert commands[0].ranks == [5] and commands[0].step_first == 3 and commands[0].step_count == 5
    assert commands[0].incident_id == incidents[0].incident_id
    # rank 5 recovers: resolved once the job is resolve_after steps past its last flag
    resolved = []
    for step in range(6, 10):
        resolved += detector.observe(gs(step, 5, False), now_ns=step)
        resolved += detector.advance(step, now_ns=step)
    assert [(i.state, i.step_last) for i in resolved] == [("resolved", 5)]
    assert resolved[0].evidence["flagged_in_dp"] == 6 and resolved[0].evidence["flagged_in_tp"] == 6


def test_isolated_flags_do_not_open_an_incident() -> None:
    detector = SlowRankDetector("j", min_steps=3, resolve_after=2, profile_steps=5)
    out = []
    for step in range(0, 40, 5):
        out += detector.observe(gs(step, step % 8, True), now_ns=step)
        out += detector.advance(step, now_ns=step)
    assert out == []
    assert detector.flagged_ranks == set()
