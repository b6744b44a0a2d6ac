"""A GC storm that lands on a few random ranks in some of the steps, for most of a run, is one problem: one job
incident from its first pause to its last, naming the ranks it hit (issue #45, class 1). It gave 3–6 incidents a
run: the first pause's rank incident, a job incident for the storm, and a new one after each quiet spell longer
than the hold-down, each pause that opened on its own rank (strong enough to open at once) one more."""

from __future__ import annotations

import pytest

from producers.simulator.catalogue import scenario_job
from tests.streams.helpers import incidents, run_engine


@pytest.mark.parametrize(("scenario", "seed", "ranks", "steps"), [
    ("gc_scatter", 0, 64, 200), ("gc_scatter_sparse", 4, 64, 200), ("gc_scatter_dense", 7, 64, 200),
    # 32 ranks: a sparse storm's pauses come 13-24 steps apart, past GC_STORM_WINDOW: 2 and 5 incidents before
    # pauses strong enough to open counted over GC_STORM_MEMORY
    ("gc_scatter_sparse", 1, 32, 120), ("gc_scatter_sparse", 3, 32, 120)])
def test_a_scattered_gc_storm_is_one_job_incident_naming_its_ranks(scenario: str, seed: int, ranks: int,
                                                                   steps: int) -> None:
    job = scenario_job(scenario, ranks=ranks, steps=steps, seed=seed)
    found = incidents(run_engine(job))
    ids = {i.incident_id for i in found}
    assert len(ids) == 1, sorted((i.incident_id, i.state, i.step_first, i.step_last) for i in found)
    last = found[-1]
    fault = job.faults[0]
    assert last.scope == "job" and "garbage-collection" in (last.cause or ""), last
    # the first pause strong enough to open: a sparse storm on 32 ranks may take 16 steps to land one
    assert last.step_first <= fault.start + (15 if ranks >= 64 else 20) and last.step_last >= steps - 20, (
        last.step_first, last.step_last)
    assert len(last.ranks) >= (5 if ranks >= 64 else 3)  # the ranks the storm hit, not one rank's name
