"""`make demo`'s own job, replayed through the detection engine in process: every injected fault found.

`make demo` exits non-zero when it misses a fault of its job, but `make test` does not run it (it
starts its own services on the default ports). Its data stall was once a single slow batch,
which the slow step by design does not report (an isolated slow step is healthy training), and
the demo failed its own check unnoticed. This replays `build_job`'s events through the same
engine the detect worker runs (`run_engine`: unpaced, as the demo sends them), and scores what
it finds exactly as the demo does, against the job's ground truth.
"""

from __future__ import annotations

from steplens.demo import build_job
from steplens.scoring import score, steps_in_ranges
from tests.streams.helpers import incidents, run_engine


def test_the_demo_job_finds_its_straggler_its_gc_storm_and_its_data_stall() -> None:
    job_id = "demo-replay"
    truth = build_job(job_id, steps=120, seed=7).ground_truth()
    latest = {i.incident_id: i for i in incidents(run_engine(build_job(job_id, steps=120, seed=7)))}
    found = list(latest.values())  # each incident's latest state, as the demo reads them from ClickHouse
    found_ranks = {r for i in found if i.rule == "SLOW_RANK" for r in i.ranks}
    found_steps = steps_in_ranges([(i.step_first, i.step_last) for i in found
                                   if i.rule == "SLOW_STEP" and i.step_first is not None
                                   and i.step_last is not None])
    ranks, steps = score(truth.slow_ranks(), found_ranks), score(truth.slow_steps(), found_steps)
    summary = [(i.rule, i.ranks, i.step_first, i.step_last) for i in found]
    assert truth.slow_ranks() == {37} and truth.slow_steps() == {40, 41, 42, 77, 78, 79}
    assert ranks.recall == 1.0 and ranks.precision == 1.0, summary
    assert steps.recall == 1.0 and steps.precision == 1.0, summary
    assert all(i.state == "resolved" for i in found), "the job ended: every incident is resolved"
