"""Scopes of the batch engine judged against the simulator's ground truth (pure, no Kafka)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from producers.simulator.catalogue import data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology
from schemas import ControlCommand
from streams.detect.engine import FRAME_SCOPES, LAG_STALE_NS, JobEngine, StatefulScope
from tests.streams.helpers import T0, incidents, run_engine, step_ms


def _opened(outputs: list[object], rule: str | None = None) -> list[str]:
    return sorted({i.incident_id for i in incidents(outputs, "open") if rule is None or i.rule == rule})


def test_frame_scopes_keep_their_state_in_engine_fields() -> None:
    """A snapshot pickles the JobEngine: each scope's state is a field of it, under its own name."""
    engine_fields = {f.name for f in fields(JobEngine)}
    stateful = [s.state for s in FRAME_SCOPES if isinstance(s, StatefulScope)]
    assert stateful and set(stateful) <= engine_fields and len(set(stateful)) == len(stateful)


def test_slow_rank_and_gc_steps_match_ground_truth() -> None:
    topo = Topology(dp=4, tp=2, pp=2)
    job = FleetJob("j1", topo, 40, [straggler(topo, 6, 1.3), *gc_pauses(topo, (20, 21), 0.66 * step_ms(topo))], 3)
    out = run_engine(job)
    truth = job.ground_truth()
    ranks = {r for i in incidents(out) if i.rule == "SLOW_RANK" for r in i.ranks}
    assert ranks == truth.slow_ranks()
    final = {i.incident_id: i for i in incidents(out)}
    steps = {s for i in final.values() if i.rule == "SLOW_STEP" for s in range(i.step_first or 0,
                                                                              (i.step_last or 0) + 1)}
    assert steps == truth.slow_steps()
    assert all(i.state == "resolved" for i in final.values()), "every incident resolved when the job ends"
    commands = [o for o in out if isinstance(o, ControlCommand)]
    assert [(c.action, c.ranks) for c in commands] == [("profile_on", sorted(truth.slow_ranks()))]


def test_jittery_healthy_job_raises_nothing() -> None:
    job = FleetJob("healthy", Topology(dp=8, tp=4, pp=2), 300, seed=11, noise=Noise(jitter=0.08))
    out = run_engine(job)
    assert incidents(out) == [], [i.summary for i in incidents(out)][:5]


def test_slow_host_is_one_host_incident() -> None:
    topo = Topology(dp=8, tp=4, pp=2)
    host_ranks = [r for r in range(topo.world) if topo.host(r) == "node-3"]
    job = FleetJob("host", topo, 60, [straggler(topo, r, 1.25, start=20) for r in host_ranks], 5)
    out = run_engine(job)
    localised = [i for i in _opened(out) if i.split(":")[2] != "job"]
    assert len(localised) == 1 and localised[0].startswith("SLOW_HOST:"), localised
    assert not [i for i in incidents(out) if i.rule == "SLOW_RANK"], "the host absorbs its ranks"
    host_incident = [i for i in incidents(out) if i.rule == "SLOW_HOST"][-1]
    assert host_incident.host == "node-3" and set(host_incident.ranks) <= set(host_ranks)
    assert host_incident.step_first is not None and host_incident.step_first >= 20


def test_hung_rank_is_told_apart_from_slow() -> None:
    job = FleetJob("hung", Topology(dp=4, tp=2, pp=2), 30, seed=2)
    out = run_engine(job, paced_s=1.0, drop=lambda e: e.rank == 5 and e.step >= 12)
    opened = [i for i in incidents(out, "open")]
    assert [(i.rule, i.ranks) for i in opened] == [("HUNG_RANK", [5])]
    assert opened[0].step_first == 12
    assert all(i.rule != "SLOW_RANK" for i in incidents(out))


def test_ranks_whose_reader_died_are_not_hung() -> None:
    """A detect worker dies: the ranks on its input partitions (here every 4th rank, across hosts) are
    silent ~10 s until the group gives the partitions to another worker, which reads their backlog
    while the peers went on. `make soak` found 73 HUNG_RANK incidents for such a death; a hang is a
    silence longer than `hang_silence_s`."""
    job = FleetJob("reader", Topology(dp=4, tp=2, pp=2), 40, seed=2)
    out = run_engine(job, paced_s=1.0, hold=lambda e: 10 if e.rank % 4 == 1 and 12 <= e.step < 22 else 0)
    assert not [i for i in incidents(out) if i.rule.startswith("HUNG")]


def test_ranks_whose_partition_is_read_late_from_the_start_are_not_hung() -> None:
    """Partitions added to the input topics (a scale-out) are read only once the decode group's next
    rebalance assigns them: the ranks the producer put there are not heard for seconds while their peers
    go on. CI's restart test found HUNG_RANK incidents "silent 1800000005 s" for them: a rank never heard
    was counted silent since 1970. Its silence counts from when the job's reports first counted it."""
    job = FleetJob("added", Topology(dp=4, tp=2, pp=2), 40, seed=2)
    out = run_engine(job, paced_s=1.0, hold=lambda e: 10 if e.rank % 4 == 1 and e.step < 12 else 0)
    assert not [i for i in incidents(out) if i.rule.startswith("HUNG")]


def test_a_rank_that_never_reports_is_hung_once_silent_for_the_hang_time() -> None:
    job = FleetJob("never", Topology(dp=4, tp=2, pp=2), 40, seed=2)
    out = run_engine(job, paced_s=1.0, drop=lambda e: e.rank == 5)
    opened = incidents(out, "open")
    assert [(i.rule, i.ranks) for i in opened] == [("HUNG_RANK", [5])]
    assert "has not reported a step" in opened[0].summary and opened[0].evidence["silent_s"] < 60
    # its silence counts from the job's first report (T0 + 1 s: the start is the first batch)
    assert opened[0].detected_ns - T0 >= 20 * 1_000_000_000


def test_a_backlog_is_not_a_hang_until_it_is_drained() -> None:
    """While every chunk says the decode stage is 8 s behind, rank 5's missing reports may still be
    queued; once no chunk has come for LAG_STALE_NS the backlog is drained, and they never came."""
    job = FleetJob("backlog", Topology(dp=4, tp=2, pp=2), 30, seed=2)
    out = run_engine(job, paced_s=1.0, drop=lambda e: e.rank == 5 and e.step >= 12, behind_s=8.0)
    hung = [i for i in incidents(out, "open") if i.rule.startswith("HUNG")]
    fed_until = T0 + (1 + 30 + 1) * 1_000_000_000  # start, 30 paced steps, end: one second each
    assert [(i.rule, i.ranks, i.step_first) for i in hung] == [("HUNG_RANK", [5], 12)]
    assert hung[0].detected_ns >= fed_until + LAG_STALE_NS, "judged while the input still lagged"


def test_silent_host_is_one_hung_host_incident() -> None:
    topo = Topology(dp=4, tp=4, pp=2)
    job = FleetJob("hunghost", topo, 30, seed=2)
    out = run_engine(job, paced_s=1.0, drop=lambda e: e.host == "node-1" and e.step >= 10)
    opened = incidents(out, "open")
    assert [(i.rule, i.host) for i in opened] == [("HUNG_HOST", "node-1")]


def test_permanent_shift_is_one_incident_then_a_new_baseline() -> None:
    topo = Topology(dp=4, tp=2, pp=1)
    job = FleetJob("shift", topo, 120, data_stalls(topo, range(40, 120), 0.33 * step_ms(topo)), 4)
    out = run_engine(job)
    opened = _opened(out, "SLOW_STEP")
    assert len(opened) == 1
    resolved = [i for i in incidents(out, "resolved") if i.rule == "SLOW_STEP"]
    assert resolved and resolved[0].evidence.get("shift") == 1.0
    assert resolved[0].step_first == 40


def test_gc_storm_is_one_incident() -> None:
    storm = [s for s in range(50, 80) if s % 3]
    topo = Topology(dp=4, tp=2, pp=2)
    job = FleetJob("storm", topo, 120, gc_pauses(topo, storm, 0.55 * step_ms(topo)), 6)
    out = run_engine(job)
    assert len(_opened(out)) == 1
    final = [i for i in incidents(out, "resolved")]
    assert final[0].step_first == min(storm) and final[0].step_last == max(storm)


def test_slow_pp_stage_without_false_alarm_for_stage_imbalance() -> None:
    topo = Topology(dp=4, tp=2, pp=4)
    stage2 = [r for r in range(topo.world) if topo.coords(r).pp == 2]
    # stages 0 and 3 carry more work by design (embedding, LM head): never an alarm
    design = [straggler(topo, r, 1.3) for r in range(topo.world) if topo.coords(r).pp in (0, 3)]
    healthy = run_engine(FleetJob("stages", topo, 80, design, 7))
    assert not [i for i in incidents(healthy) if i.rule == "SLOW_STAGE"]
    job = FleetJob("stage2", topo, 80, [*design, *(straggler(topo, r, 1.25, start=40) for r in stage2)], 7)
    out = run_engine(job)
    stage_ids = _opened(out, "SLOW_STAGE")
    assert len(stage_ids) == 1
    opened = next(i for i in incidents(out, "open") if i.rule == "SLOW_STAGE")
    assert opened.stage == 2 and sorted(opened.ranks) == sorted(stage2) and opened.step_first == 40
    assert not [i for i in incidents(out) if i.rule in ("SLOW_RANK", "SLOW_HOST")]


def test_half_a_stage_slow_on_one_host_is_that_hosts_not_the_stages() -> None:
    """32 ranks TP4 PP2 DP4, 8 devices a host: each stage spans two hosts. One host's ranks slow (half of
    stage 1) move the stage's median over its baseline; it is one SLOW_HOST, no SLOW_STAGE beside it."""
    topo = Topology(dp=4, tp=4, pp=2, devices_per_host=8)
    host2 = topo.host_ranks(2)
    assert {topo.coords(r).pp for r in host2} == {1} and len(host2) == 8
    out = run_engine(FleetJob("half-stage", topo, 80, [straggler(topo, r, 1.3, start=40) for r in host2], 7))
    assert not [i for i in incidents(out) if i.rule == "SLOW_STAGE" or "SLOW_STAGE" in i.rules]
    assert [i.host for i in incidents(out, "open") if "SLOW_HOST" in i.rules] == ["node-2"]


def test_gc_leak_on_one_rank_and_gc_storm_over_many() -> None:
    topo = Topology(dp=8, tp=4, pp=2)
    leak = FleetJob("leak", topo, 80, gc_pauses(topo, range(40, 60, 3), 1.44 * step_ms(topo), ranks=[33]), 3)
    out = run_engine(leak)
    opened = incidents(out, "open")
    assert [i.ranks for i in opened] == [[33]] and "R1" in opened[0].rules, [(i.rule, i.ranks) for i in opened]
    assert "SLOW_STEP" in [i for i in incidents(out) if i.state == "resolved"][-1].rules
    rng = np.random.default_rng(0)
    storm = [f for s in range(40, 50) for f in gc_pauses(topo, (s,), 1.55 * step_ms(topo),
                                                         ranks=rng.choice(topo.world, 16, replace=False).tolist())]
    out = run_engine(FleetJob("storm2", topo, 80, storm, 3))
    assert len(_opened(out)) == 1 and _opened(out)[0].startswith("SLOW_STEP:"), _opened(out)
