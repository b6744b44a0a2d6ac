"""The ledger keeps one incident per fault episode across a detector that forgets (a restart)."""

from __future__ import annotations

from schemas import ControlCommand, Incident
from streams.incidents import IncidentLedger

S = 10**9


def _rank_incident(first: int, last: int, state: str, now: int, rank: int = 6) -> Incident:
    return Incident(incident_id=f"SLOW_RANK:j:r{rank}:s{first}", job="j", rule="SLOW_RANK", state=state,  # type: ignore[arg-type]
                    severity="warning", scope="rank", summary="s", detected_ns=now, ranks=[rank], host="h",
                    step_first=first, step_last=last)


def _profile(incident: Incident) -> ControlCommand:
    return ControlCommand(command_id=f"profile:{incident.incident_id}", job="j", action="profile_on",
                          ranks=incident.ranks, step_first=1, step_count=5, issued_ns=1,
                          incident_id=incident.incident_id)


def _restarted(before: IncidentLedger, published: list[Incident | ControlCommand]) -> IncidentLedger:
    after = IncidentLedger(idle_ns=before.idle_ns)
    after.restore([p for p in published if isinstance(p, Incident)],
                  [p for p in published if isinstance(p, ControlCommand)], now_ns=100 * S)
    return after


def test_redetection_after_a_restart_updates_the_open_incident_and_profiles_once() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    first = _rank_incident(3, 5, "open", 1 * S)
    published = ledger.reconcile([first, _profile(first)], 1 * S)
    assert [type(p) for p in published] == [Incident, ControlCommand]
    ledger = _restarted(ledger, published)
    again = _rank_incident(20, 22, "open", 101 * S)  # the fresh detector names the same fault anew
    out = ledger.reconcile([again, _profile(again)], 101 * S)
    assert len(out) == 1 and isinstance(out[0], Incident)
    assert out[0].incident_id == first.incident_id and out[0].state == "update"
    assert (out[0].step_first, out[0].step_last) == (3, 22)
    done = ledger.reconcile([_rank_incident(20, 30, "resolved", 102 * S)], 102 * S)
    assert [(i.incident_id, i.state) for i in done if isinstance(i, Incident)] == [(first.incident_id, "resolved")]
    assert ledger.open_incidents() == []


def test_a_replay_of_a_resolved_episode_is_dropped_but_a_later_episode_opens() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    opened = _rank_incident(3, 5, "open", 1 * S)
    published = ledger.reconcile([opened, _profile(opened), _rank_incident(3, 12, "resolved", 2 * S)], 2 * S)
    ledger = _restarted(ledger, published)
    replay = _rank_incident(4, 6, "open", 101 * S)
    assert ledger.reconcile([replay, _profile(replay), _rank_incident(4, 9, "update", 101 * S)], 101 * S) == []
    later = _rank_incident(40, 42, "open", 102 * S)
    out = ledger.reconcile([later, _profile(later)], 102 * S)
    assert [getattr(o, "incident_id", None) for o in out] == [later.incident_id, later.incident_id]


def test_job_end_and_idleness_resolve_what_no_detector_will() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    published = ledger.reconcile([_rank_incident(3, 5, "open", 1 * S), _rank_incident(3, 5, "open", 1 * S, rank=9)],
                                 1 * S)
    ledger = _restarted(ledger, published)
    ended = ledger.job_ended("j", 110 * S)
    assert sorted((i.ranks[0], i.state) for i in ended) == [(6, "resolved"), (9, "resolved")]
    assert ledger.reconcile([_rank_incident(50, 52, "open", 111 * S)], 111 * S) == []  # nothing opens after the end

    idle = IncidentLedger(idle_ns=300 * S)
    idle.reconcile([_rank_incident(3, 5, "open", 1 * S)], 1 * S)
    assert idle.expire(200 * S) == []
    idle.touch("j", 250 * S)
    assert idle.expire(500 * S) == []
    assert [i.state for i in idle.expire(551 * S)] == ["resolved"]


def test_different_ranks_and_rules_are_different_incidents() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    a, b = _rank_incident(3, 5, "open", S, rank=6), _rank_incident(3, 5, "open", S, rank=7)
    step = Incident(incident_id="SLOW_STEP:j:s3", job="j", rule="SLOW_STEP", state="open", severity="warning",
                    scope="job", summary="s", detected_ns=S, step_first=3, step_last=3)
    out = ledger.reconcile([a, b, step], S)
    assert [o.incident_id for o in out if isinstance(o, Incident)] == [a.incident_id, b.incident_id, step.incident_id]


def test_a_gap_right_after_a_restart_reopens_the_same_incident_but_a_fresh_episode_does_not() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    first = _rank_incident(0, 52, "open", 1 * S)
    ledger = _restarted(ledger, ledger.reconcile([first, _profile(first)], 1 * S))
    # the fresh detector merges, then (empty windows after the restart) sees a short gap and resolves
    fresh = _rank_incident(69, 71, "open", 101 * S)
    out = ledger.reconcile([fresh, _rank_incident(69, 120, "resolved", 102 * S)], 102 * S)
    assert [(o.incident_id, o.state) for o in out if isinstance(o, Incident)] == [
        (first.incident_id, "update"), (first.incident_id, "resolved")]
    again = _rank_incident(135, 137, "open", 103 * S)
    out = ledger.reconcile([again, _profile(again)], 103 * S)
    assert [(o.incident_id, o.state) for o in out if isinstance(o, Incident)] == [(first.incident_id, "update")]
    assert not any(isinstance(o, ControlCommand) for o in out)  # profiled once already
    # an incident opened and resolved by this worker itself is not re-opened: a new episode is new
    own = _rank_incident(300, 302, "open", 104 * S, rank=9)
    ledger.reconcile([own, _rank_incident(300, 310, "resolved", 105 * S, rank=9)], 105 * S)
    later = _rank_incident(320, 322, "open", 106 * S, rank=9)
    out = ledger.reconcile([later], 106 * S)
    assert [o.incident_id for o in out if isinstance(o, Incident)] == [later.incident_id]


def test_an_incident_resolved_just_before_the_restart_is_reopened_by_the_same_fault() -> None:
    ledger = IncidentLedger(idle_ns=300 * S)
    first = _rank_incident(0, 52, "open", 1 * S)
    published = ledger.reconcile([first, _profile(first), _rank_incident(0, 219, "resolved", 90 * S)], 90 * S)
    ledger = _restarted(ledger, published)  # restarted at 100 s, 10 s after the resolve
    again = _rank_incident(380, 382, "open", 101 * S)
    out = ledger.reconcile([again, _profile(again)], 101 * S)
    assert [(o.incident_id, o.state) for o in out if isinstance(o, Incident)] == [(first.incident_id, "update")]
    assert not any(isinstance(o, ControlCommand) for o in out)
