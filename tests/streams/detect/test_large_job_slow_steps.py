"""A job-wide slowdown of a 1,024-rank job is the job's incident, whatever noise flags beside it."""

from __future__ import annotations

from producers.simulator.catalogue import data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from tests.streams.helpers import incidents, run_engine


def test_gc_pauses_and_data_stalls_of_every_rank_open_slow_step_incidents_at_1024_ranks() -> None:
    """At 1,024 ranks the healthy noise flags a few ranks in every step; a GC pause of every rank
    (+88 % step time) joined one of them, another each step, and never opened (the join now asks a
    culprit of the same step to account for at least half the step's growth)."""
    topo = Topology(dp=32, tp=8, pp=4)
    step = FleetJob("x", topo, 1).nominal_ms
    faults = [straggler(topo, 13, 1.3, 0, 119), *gc_pauses(topo, (30, 31, 32), 0.88 * step),
              *data_stalls(topo, (80, 81, 82, 83), 1.1 * step)]
    found = [i for i in incidents(run_engine(FleetJob("big", topo, 120, faults, 11))) if i.state == "open"]
    slow_steps = sorted((i.step_first, i.cause) for i in found if i.rule == "SLOW_STEP" and i.scope == "job")
    assert [first for first, _ in slow_steps] == [30, 80], found
    assert {i.ranks[0] for i in found if i.rule == "SLOW_RANK"} == {13}
