from schemas import Incident, JobEvent
from steplens.config import DetectionConfig
from streams.analysis.job import JobAnalysis
from streams.records import GroupStep


def gs(step: int, group: int, step_ms: float, size: int = 4, world: int = 8) -> GroupStep:
    return GroupStep(job="j", domain="dp", group=group, size=size, world=world, step=step, reported=size, missing=0,
                     start_ns=1, end_ns=2, step_ms=step_ms, busy_max_ms=1.0, busy_median_ms=1.0, busy_mean_ms=1.0,
                     wait_ratio=0.0, slowest_rank=0, slowest_host="h", slowest_z=0.0, flagged=False,
                     slowest_excess_phase=None, phase_max={"data_ms": step_ms - 480}, phase_mean={})


CFG = DetectionConfig(warmup_steps=2, baseline_steps=20, window_lateness_steps=3)


def test_job_step_waits_for_all_groups_then_releases_in_order() -> None:
    analysis = JobAnalysis("j", CFG)
    out = []
    # step 1 completes before step 0: nothing released until step 0 is complete too
    out += analysis.on_group_step(gs(1, 0, 500.0), 0)
    out += analysis.on_group_step(gs(0, 0, 500.0), 0)
    out += analysis.on_group_step(gs(1, 1, 500.0), 0)
    assert analysis.stats.steps_released == 0
    out += analysis.on_group_step(gs(0, 1, 500.0), 0)
    assert analysis.stats.steps_released == 2
    assert out == []


def test_slow_step_detected_and_job_end_resolves_in_any_order() -> None:
    analysis = JobAnalysis("j", CFG)
    out = analysis.on_job_event(JobEvent(job="j", phase="end", world=8, ts_ns=1, last_step=9), 0)
    assert out == [] and not analysis.finished
    for step in range(10):
        ms = 900.0 if step == 9 else 500.0
        for group in (0, 1):
            out += analysis.on_group_step(gs(step, group, ms), 0)
    incidents = [o for o in out if isinstance(o, Incident)]
    assert [(i.state, i.step_first, i.step_last) for i in incidents] == [("open", 9, 9), ("resolved", 9, 9)]
    assert incidents[0].cause == "slow data loading"
    assert analysis.finished


def test_missing_group_is_released_after_lateness() -> None:
    analysis = JobAnalysis("j", CFG)
    analysis.on_group_step(gs(0, 0, 500.0), 0)  # group 1 never reports step 0
    for step in range(1, 4):
        for group in (0, 1):
            analysis.on_group_step(gs(step, group, 500.0), 0)
    assert analysis.stats.steps_released == 4 and analysis.stats.steps_incomplete == 1


def test_group_skew_during_catch_up_releases_complete_steps_only() -> None:
    analysis = JobAnalysis("j", CFG)
    for step in range(20):  # group 0's summaries arrive long before group 1's
        analysis.on_group_step(gs(step, 0, 500.0), 0)
    assert analysis.stats.steps_released == 0
    for step in range(20):
        analysis.on_group_step(gs(step, 1, 500.0), 0)
    assert analysis.stats.steps_released == 20 and analysis.stats.steps_incomplete == 0
