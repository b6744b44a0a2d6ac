"""Hold-down: a problem that re-fires soon after its incident resolved re-opens that incident."""

from __future__ import annotations

from schemas import Incident
from streams.detect.incidents.book import IncidentBook
from streams.detect.scopes.finding import Finding


def _job(rule: str, step: int, open_after: int = 2, **kw: object) -> Finding:
    return Finding(rule=rule, key="job", scope="job", step=step, summary=rule, open_after=open_after,
                   resolve_after=3, **kw)  # type: ignore[arg-type]


def _run(book: IncidentBook, plan: dict[int, list[Finding]], steps: range) -> list[Incident]:
    out: list[Incident] = []
    for step in steps:
        out += [o for o in book.observe(step, plan.get(step, []), step) if isinstance(o, Incident)]
    return out


def test_refire_within_hold_down_reopens_the_same_incident() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_job("SLOW_STEP", s)] for s in range(10, 14)}            # resolves at 16 (3 clean steps)
    plan |= {s: [_job("R4", s)] for s in range(20, 25)}                  # 4 steps after the resolve
    out = _run(book, plan, range(10, 40))
    assert len({o.incident_id for o in out}) == 1
    assert [o.state for o in out] == ["open", "resolved", "update", "resolved"]
    last = out[-1]
    assert (last.step_first, last.step_last) == (10, 24)
    assert set(last.rules) == {"SLOW_STEP", "R4"}
    assert out[2].evidence["reopened"] == 1.0


def test_refire_after_hold_down_is_a_new_incident() -> None:
    book = IncidentBook(job="j", hold_down_steps=3)
    plan = {s: [_job("SLOW_STEP", s)] for s in range(10, 14)}
    plan |= {s: [_job("SLOW_STEP", s)] for s in range(30, 34)}
    out = _run(book, plan, range(10, 45))
    assert len({o.incident_id for o in out}) == 2
    assert [o.state for o in out] == ["open", "resolved", "open", "resolved"]


def test_a_held_incident_reopens_only_after_the_usual_persistence() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_job("SLOW_STEP", s)] for s in range(10, 14)}
    plan[18] = [_job("SLOW_STEP", 18)]  # one flagged step: noise, not enough to re-open
    plan |= {s: [_job("SLOW_STEP", s)] for s in (22, 23)}  # still within 10 steps of the resolve at 16
    out = _run(book, plan, range(10, 40))
    assert [o.state for o in out] == ["open", "resolved", "update", "resolved"]
    assert out[2].step_last == 23, "re-opened at the second consecutive flagged step"


def test_resolve_now_is_held_too() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_job("SLOW_STEP", s)] for s in range(10, 13)}
    plan[13] = [_job("SLOW_STEP", 13, evidence={"resolve_now": 1.0})]  # a shift: new baseline
    plan |= {s: [_job("R7", s, open_after=3)] for s in range(14, 20)}
    out = _run(book, plan, range(10, 30))
    assert len({o.incident_id for o in out}) == 1
    assert out[-1].state == "resolved" and set(out[-1].rules) == {"SLOW_STEP", "R7"}


def test_hold_down_zero_keeps_every_resolve_final() -> None:
    book = IncidentBook(job="j", hold_down_steps=0)
    plan = {s: [_job("SLOW_STEP", s)] for s in (*range(10, 14), *range(18, 22))}
    assert len({o.incident_id for o in _run(book, plan, range(10, 30))}) == 2


def test_job_end_drops_what_is_held() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    _run(book, {s: [_job("SLOW_STEP", s)] for s in range(10, 14)}, range(10, 20))
    assert book.held
    book.finish(0)
    assert not book.held and not book.tracks


def _on_node0(rule: str, key: str, scope: str, ranks: list[int], step: int) -> Finding:
    return Finding(rule=rule, key=key, scope=scope, step=step, summary=rule, ranks=ranks, host="node-0",
                   open_after=3, resolve_after=3)  # type: ignore[arg-type]


def test_a_host_incident_continues_its_worst_ranks_incident() -> None:
    from schemas import ControlCommand

    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_on_node0("SLOW_RANK", "rank:3", "rank", [3], s)] for s in range(60, 66)}  # resolved at 68
    plan |= {s: [_on_node0("SLOW_HOST", "host:node-0", "host", list(range(8)), s)] for s in range(71, 80)}
    out = []
    for step in range(60, 90):
        out += book.observe(step, plan.get(step, []), step)
    incidents = [o for o in out if isinstance(o, Incident)]
    assert len({o.incident_id for o in incidents}) == 1
    last = incidents[-1]
    assert (last.scope, last.host, last.step_first, last.state) == ("host", "node-0", 60, "resolved")
    assert set(last.rules) == {"SLOW_RANK", "SLOW_HOST"}
    commands = [o for o in out if isinstance(o, ControlCommand)]
    assert [c.ranks for c in commands] == [[3], list(range(8))], "the host's ranks are profiled too"


def test_a_re_firing_rank_absorbed_by_a_host_candidate_is_still_taken_over() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_on_node0("SLOW_RANK", "rank:3", "rank", [3], s)] for s in range(60, 66)}
    plan[66] = [_on_node0("SLOW_HOST", "host:node-0", "host", list(range(8)), 66)]  # absorbs rank 3, dies
    plan[67] = [_on_node0("SLOW_RANK", "rank:3", "rank", [3], 67)]                  # rank 3 re-fires: revived
    plan |= {s: [_on_node0("SLOW_HOST", "host:node-0", "host", list(range(8)), s)] for s in range(69, 75)}
    out = []
    for step in range(60, 90):
        out += book.observe(step, plan.get(step, []), step)
    incidents = [o for o in out if isinstance(o, Incident)]
    assert len({o.incident_id for o in incidents}) == 1
    assert incidents[-1].scope == "host"


def test_a_rank_of_a_held_host_incident_reopens_the_host_incident() -> None:
    """Unstable power comes in bursts: the host incident resolves between them, and a burst's first
    finding is one device's R2 (opens at once). It re-opens the host's incident, not one of its own."""
    book = IncidentBook(job="j", hold_down_steps=10)
    host = list(range(8))
    plan = {s: [_on_node0("SLOW_HOST", "host:node-0", "host", host, s)] for s in range(65, 68)}
    r2 = _on_node0("R2", "rank:7", "rank", [7], 73)
    r2.open_after = 1
    plan[73] = [r2]                                                                  # resolved at 72: held
    plan |= {s: [_on_node0("SLOW_HOST", "host:node-0", "host", host, s)] for s in range(74, 76)}
    plan[80] = [Finding(rule="R2", key="rank:12", scope="rank", step=80, summary="R2", ranks=[12], host="node-1",
                        open_after=1, resolve_after=5)]                              # another host's: its own
    incidents = _run(book, plan, range(65, 95))
    assert len({o.incident_id for o in incidents if o.host == "node-0"}) == 1
    reopened = next(o for o in incidents if o.state == "update")
    assert (reopened.scope, reopened.evidence.get("reopened")) == ("host", 1.0)
    assert "R2" in incidents[-2].rules or "R2" in incidents[-1].rules
    assert len({o.incident_id for o in incidents}) == 2, "rank 12 of node-1 is not node-0's"


def _rank(step: int) -> Finding:
    return Finding(rule="SLOW_RANK", key="rank:7", scope="rank", step=step, summary="rank 7 slow", ranks=[7],
                   open_after=2, resolve_after=3)


def test_a_rank_slow_in_bursts_is_one_incident_recording_each_burst() -> None:
    # 5-step bursts every 25 steps: each resolves 3 clean steps after it ends, 17 steps before the next
    book = IncidentBook(job="j", hold_down_steps=10, culprit_hold_down_steps=50)
    bursts = (20, 45, 70, 95)
    plan = {s: [_rank(s)] for b in bursts for s in range(b, b + 5)}
    out = _run(book, plan, range(0, 120))
    assert len({o.incident_id for o in out}) == 1
    assert [o.state for o in out] == ["open", "resolved"] + ["update", "resolved"] * 3
    last = out[-1]
    assert (last.step_first, last.step_last) == (20, 99)
    assert last.evidence["bursts"] == 4.0
    assert [last.evidence[f"burst_{n}_step"] for n in (2, 3, 4)] == [45.0, 70.0, 95.0]
    # a job-wide problem keeps the short hold-down: slow steps 25 apart are separate episodes
    book = IncidentBook(job="j", hold_down_steps=10, culprit_hold_down_steps=50)
    jobs = _run(book, {s: [_job("SLOW_STEP", s)] for b in bursts for s in range(b, b + 5)}, range(0, 120))
    assert len({o.incident_id for o in jobs}) == 4


def _group(step: int) -> Finding:
    return Finding(rule="R6", key="group:dp/3", scope="group", step=step, summary="R6", domain="dp", group=3,
                   ranks=[3, 7], open_after=3, resolve_after=3, adopts="job")  # type: ignore[arg-type]


def test_a_group_adopts_the_job_incident_its_shift_just_resolved() -> None:
    """The job's slow steps open first, become the new baseline (resolve_now) a step before the slow
    group's bandwidth finding has persisted: the group still takes that incident over (one incident
    for one fault, wrong_dp_topology), instead of opening a second one beside the resolved job's."""
    book = IncidentBook(job="j", hold_down_steps=10, shift_hold_steps=50)
    plan = {s: [_job("SLOW_STEP", s, open_after=2)] for s in range(10, 13)}
    plan[13] = [_job("SLOW_STEP", 13, evidence={"resolve_now": 1.0})]
    plan[14] = [_job("SLOW_STEP", 14)]  # the job's incident back as a candidate (revived from held)
    for s in range(12, 20):
        plan.setdefault(s, []).append(_group(s))
    out = _run(book, plan, range(10, 30))
    assert len({o.incident_id for o in out}) == 1, [(o.incident_id, o.state) for o in out]
    last = out[-1]
    assert last.scope == "group" and last.rules[0] == "R6" and "SLOW_STEP" in last.rules
    assert last.step_first == 10 and "resolve_now" not in last.evidence
