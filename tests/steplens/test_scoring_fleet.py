"""The fleet scorer on hand-made incidents: a miss, a wrong-scope hit, a duplicate, a
fragmented fault, a false alarm, a late alarm (pure unit tests, no pipeline)."""

from __future__ import annotations

from typing import Any

import pytest

from steplens.scoring import RunTruth, false_alarms_per_100k, latest_incidents, score_run, summarise

HOST_FAULT: dict[str, Any] = {
    "job": "j", "kind": "slow_compute", "scope": "host", "start_step": 40, "end_step": 60,
    "ranks": list(range(8, 16)), "hosts": ["node-1"], "links": [], "stage": None, "domain": None, "group": None,
    "rules": ["SLOW_HOST"],
}
RANK_FAULT: dict[str, Any] = {
    "job": "j", "kind": "slow_compute", "scope": "rank", "start_step": 40, "end_step": 60, "ranks": [21],
    "hosts": ["node-2"], "links": [], "stage": None, "domain": None, "group": None, "rules": ["SLOW_RANK", "R5"],
}


def inc(iid: str, rule: str, scope: str, first: int, last: int, *, ranks: list[int] | None = None,
        host: str | None = None, rules: list[str] | None = None, ns: int = 1, state: str = "open") -> dict[str, Any]:
    return {"incident_id": iid, "job": "j", "rule": rule, "rules": rules or [], "scope": scope, "ranks": ranks or [],
            "host": host, "step_first": first, "step_last": last, "detected_ns": ns, "state": state}


def run(fault: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
    truth = RunTruth(job="j", faults=[fault], total_steps=100, rank_steps=6400)
    return score_run(truth, latest_incidents(messages))


def test_right_incident_detects_localises_and_attributes() -> None:
    s = run(HOST_FAULT, [inc("a", "SLOW_HOST", "host", 42, 44, host="node-1", ns=1),
                         inc("a", "SLOW_HOST", "host", 42, 60, host="node-1", ns=2, state="update")])
    f = s.faults[0]
    assert f.detected and f.localised and f.rule_attribution == 1.0 and f.incidents == 1
    assert f.delay_steps == 4.0  # detected at the open state's last step (44), onset 40
    assert s.false_alarms == 0


def test_miss() -> None:
    s = run(HOST_FAULT, [])
    assert not s.faults[0].detected and not s.faults[0].localised and s.faults[0].rule_attribution == 0.0
    assert summarise([s])["recall"] == 0.0


def test_wrong_scope_hit_is_detected_but_not_localised() -> None:
    s = run(HOST_FAULT, [inc("r", "SLOW_RANK", "rank", 41, 50, ranks=[9])])
    f = s.faults[0]
    assert f.detected and not f.localised and f.rule_attribution == 0.0


def test_wrong_member_is_not_localised() -> None:
    s = run(RANK_FAULT, [inc("r", "SLOW_RANK", "rank", 41, 50, ranks=[21, 22])])
    assert s.faults[0].detected and not s.faults[0].localised and s.faults[0].rule_attribution == 0.5


def test_fragmented_fault_counts_every_piece() -> None:
    pieces = [inc(f"r{r}", "SLOW_RANK", "rank", 41, 45, ranks=[r]) for r in range(8, 16)]
    s = run(HOST_FAULT, pieces)
    assert s.faults[0].incidents == 8 and not s.faults[0].localised
    assert summarise([s])["incidents_per_fault"] == 8.0


def test_duplicate_incident_raises_incidents_per_fault_not_false_alarms() -> None:
    s = run(HOST_FAULT, [inc("a", "SLOW_HOST", "host", 41, 50, host="node-1"),
                         inc("b", "SLOW_HOST", "host", 42, 51, host="node-1")])
    assert s.faults[0].incidents == 2 and s.false_alarms == 0
    assert summarise([s])["precision"] == 1.0


def test_false_alarm_elsewhere_lowers_precision() -> None:
    s = run(HOST_FAULT, [inc("a", "SLOW_HOST", "host", 41, 50, host="node-1"),
                         inc("x", "SLOW_RANK", "rank", 45, 47, ranks=[50])])
    assert s.false_alarms == 1
    assert summarise([s])["precision"] == 0.5


def test_late_alarm_after_the_fault_is_a_false_alarm_and_the_fault_a_miss() -> None:
    s = run(HOST_FAULT, [inc("late", "SLOW_HOST", "host", 90, 95, host="node-1")])
    assert not s.faults[0].detected and s.false_alarms == 1


def test_slow_alarm_inside_the_fault_reports_its_delay() -> None:
    s = run(HOST_FAULT, [inc("slow", "SLOW_HOST", "host", 58, 60, host="node-1")])
    assert s.faults[0].detected and s.faults[0].delay_steps == 20.0


def test_healthy_run_false_alarm_rate() -> None:
    healthy = score_run(RunTruth(job="j", faults=[], total_steps=100, rank_steps=50_000),
                        latest_incidents([inc("x", "SLOW_STEP", "job", 5, 6)]))
    assert healthy.false_alarms == 1
    assert false_alarms_per_100k([healthy]) == 2.0
    assert summarise([healthy])["recall"] is None and summarise([healthy])["precision"] is None


LINK_FAULT: dict[str, Any] = {**HOST_FAULT, "scope": "link", "links": ["node-1/rdma"], "rules": ["SLOW_LINK"]}


@pytest.mark.parametrize(("link", "ok"), [("node-1/rdma", True), ("node-1->node-5", True), ("node-1:eth0", True),
                                          ("node-11/rdma", False), ("node-2/rdma", False)])
def test_link_incident_is_localised_by_its_host_token(link: str, ok: bool) -> None:
    message = {**inc("l", "SLOW_LINK", "link", 41, 50), "link": link}
    s = run(LINK_FAULT, [message])
    assert s.faults[0].localised is ok and s.faults[0].detected is ok


def test_an_incident_of_another_attempt_does_not_match_a_fault() -> None:
    """A relaunch re-runs step numbers: the first attempt's crash incident at step 60 is not a
    detection of a slow rank the second attempt has from step 60, and vice versa."""
    crash = {**HOST_FAULT, "kind": "job_crash", "scope": "job", "start_step": 60, "end_step": 60, "ranks": [],
             "hosts": [], "rules": ["JOB_STOPPED"], "attempt": 0}
    slow = {**RANK_FAULT, "start_step": 60, "end_step": None, "attempt": 1}
    stopped = inc("s", "JOB_STOPPED", "job", 60, 60)
    slow_rank = {**inc("r", "SLOW_RANK", "rank", 61, 99, ranks=[21]), "attempt": 1}
    truth = RunTruth(job="j", faults=[crash, slow], total_steps=100, rank_steps=6400)
    s = score_run(truth, latest_incidents([stopped, slow_rank]))
    assert [f.incidents for f in s.faults] == [1, 1] and s.false_alarms == 0
    truth = RunTruth(job="j", faults=[crash], total_steps=100, rank_steps=6400)
    assert score_run(truth, latest_incidents([stopped, slow_rank])).false_alarms == 1


def test_an_event_with_no_rules_is_not_a_fault_and_absorbs_no_alarm() -> None:
    """A quick restart is in the ground truth (it happened) but nothing should report it: an
    incident during it is a false alarm, not its detection."""
    restart = {**HOST_FAULT, "kind": "job_crash", "scope": "job", "start_step": 60, "end_step": 60, "rules": []}
    s = run(restart, [inc("s", "JOB_STOPPED", "job", 60, 60)])
    assert s.faults == [] and s.false_alarms == 1


KILLED_FAULT: dict[str, Any] = {
    "job": "j", "kind": "hung_rank", "scope": "job", "start_step": 60, "end_step": 99, "ranks": [21],
    "hosts": ["node-2"], "links": [], "stage": None, "domain": None, "group": None, "rules": ["JOB_STOPPED"],
}


@pytest.mark.parametrize(("message", "ok"), [
    (inc("a", "JOB_STOPPED", "job", 60, 60), True),  # the job's stop: all the evidence there was
    (inc("a", "HUNG_RANK", "rank", 60, 60, ranks=[21], rules=["JOB_STOPPED"]), True),  # who stopped first
    (inc("a", "HUNG_RANK", "rank", 60, 60, ranks=[22], rules=["JOB_STOPPED"]), False),  # a wrong rank
    (inc("a", "HUNG_HOST", "host", 60, 60, host="node-2", rules=["JOB_STOPPED"]), True),
    (inc("a", "HUNG_HOST", "host", 60, 60, host="node-3", rules=["JOB_STOPPED"]), False),
])
def test_a_job_scope_fault_with_a_culprit_is_localised_by_naming_exactly_it(message: dict[str, Any],
                                                                          ok: bool) -> None:
    s = summarise([run(KILLED_FAULT, [message])])
    assert s["recall"] == 1.0 and s["localisation"] == (1.0 if ok else 0.0)
