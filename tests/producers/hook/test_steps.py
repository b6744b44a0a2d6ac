"""producers/hook/steps.py: a finished step, as the training thread left it, becomes one StepEvent."""

from __future__ import annotations

from producers.hook.identity import RankInfo
from producers.hook.steps import DoneStep, StepState, phase_totals, step_event

RANK = RankInfo(job="job-u", rank=1, world=4, host="node-0", device=1, attempt=3)


def test_appended_phase_durations_are_summed_into_the_step_event() -> None:
    state = StepState(7, start_ns=1_000, t0=0, interstep_ns=2_500_000)
    state.phases += [("data", 1.0), ("forward", 4.0), ("data", 0.5), ("backward", 8.0)]
    done = DoneStep(state, end_ns=9_000, samples=8, tokens=None, batch_size=8, flops=1e9, gc_ms=0.25, gc_count=1,
                    profiling=True, rank=RANK)
    ph = phase_totals(state)
    assert ph == {"data": 1.5, "forward": 4.0, "backward": 8.0}
    ev = step_event(done, ph, peak_flops=2e12)
    assert (ev.job, ev.rank, ev.step, ev.start_ns, ev.end_ns, ev.attempt) == ("job-u", 1, 7, 1_000, 9_000, 3)
    assert (ev.phases.data_ms, ev.phases.forward_ms, ev.phases.backward_ms, ev.phases.optimizer_ms) == (
        1.5, 4.0, 8.0, None)
    assert ev.phases.interstep_cpu_ms == 2.5 and ev.phases.gc_ms == 0.25 and ev.gc_count == 1
    assert ev.profiling and ev.peak_flops == 2e12 and ev.samples == 8


def test_the_first_step_has_no_interstep_gap() -> None:
    done = DoneStep(StepState(0, start_ns=1, t0=0, interstep_ns=None), end_ns=2, samples=None, tokens=None,
                    batch_size=None, flops=None, gc_ms=None, gc_count=None, profiling=False, rank=RANK)
    assert step_event(done, {}, peak_flops=None).phases.interstep_cpu_ms is None


def test_the_hook_times_every_contract_phase_but_the_gap_between_steps() -> None:
    from producers.hook.steps import TIMED_PHASES
    from schemas.columns import PHASES

    assert [f"{p}_ms" for p in TIMED_PHASES] == [p for p in PHASES if p != "interstep_cpu_ms"]
