"""The incident -> alert mapping and the book of firing alerts (pure: times are arguments)."""

from __future__ import annotations

from dataclasses import replace

from schemas import MitigationAction
from streams.alerts.book import EXPIRY_RESENDS, AlertBook
from streams.alerts.mapping import alert, annotations_of, labels_of, rfc3339
from tests.sinks.samples import incident

S = 1_000_000_000
T0 = 1_800_000_000 * S


def test_labels_name_the_incident_and_annotations_describe_it() -> None:
    inc = incident(incident_id="i-1", job="j", ranks=[3], detected_ns=T0)
    assert labels_of(inc) == {"alertname": "SteplensSlowRank", "rule": "SLOW_RANK", "training_job": "j",
                              "scope": "rank", "severity": "warning", "incident_id": "i-1", "host": "node-1",
                              "rank": "3", "group": "dp/1", "device": "3"}
    assert "job" not in labels_of(inc)  # Prometheus' scrape job: never the training job
    notes = annotations_of(inc)
    assert notes["runbook_url"].startswith("file://") and notes["runbook_url"].endswith("docs/runbooks.md#slow_rank")
    assert annotations_of(inc, runbook_base="https://docs.example/runbooks.html")["runbook_url"] == \
        "https://docs.example/runbooks.html#slow_rank"
    assert notes["description"].splitlines() == ["rank 3 is slow", "training job j, scope rank, steps 10-12",
                                                 "Likely cause: straggler.", "What to do: check the host."]
    assert notes["summary"] == "rank 3 is slow" and notes["cause"] == "straggler"
    assert notes["suggestion"] == "check the host" and notes["incident_id"] == "i-1"
    assert notes["steps"] == "10-12" and notes["figures"] == "observed 1250, expected 1000, threshold 1100 ms"
    assert notes["report"] == "steplens incidents --job j --rule SLOW_RANK"
    assert annotations_of(inc, "https://r.example/{job}/{incident_id}")["report"] == "https://r.example/j/i-1"


def test_a_relaunch_s_alerts_carry_its_attempt() -> None:
    assert "attempt" not in labels_of(incident())  # the first launch: the labels of 1.3 jobs
    assert labels_of(incident(attempt=2))["attempt"] == "2"


def test_several_ranks_are_an_annotation_not_a_label() -> None:
    inc = incident(ranks=[3, 7])
    assert "rank" not in labels_of(inc)
    assert annotations_of(inc)["ranks"] == "3,7"


def test_alert_times_are_rfc3339_and_never_end_before_they_start() -> None:
    assert rfc3339(T0 + 1_500_000) == "2027-01-15T08:00:00.001Z"
    body = alert({"alertname": "R1"}, {}, T0, T0 - S)
    assert body["startsAt"] == body["endsAt"]


def test_a_firing_incident_is_posted_then_re_sent_every_resend_interval() -> None:
    book = AlertBook(resend_s=60)
    book.apply(incident(incident_id="a", detected_ns=T0))
    [(incident_id, body)] = book.due(T0 + S)
    assert incident_id == "a"
    assert body["startsAt"] == rfc3339(T0)
    assert body["endsAt"] == rfc3339(T0 + S + EXPIRY_RESENDS * 60 * S)  # expires if the bridge dies
    book.posted(["a"], T0 + S)
    assert book.due(T0 + 30 * S) == []
    assert book.next_due_ns() == T0 + 61 * S
    assert [i for i, _ in book.due(T0 + 61 * S)] == ["a"]


def test_updates_keep_the_labels_and_change_the_annotations() -> None:
    book = AlertBook()
    first = incident(incident_id="a", detected_ns=T0)
    book.apply(first)
    book.posted(["a"], T0)
    book.apply(replace(first, state="update", severity="critical", summary="worse", detected_ns=T0 + 5 * S))
    [(_, body)] = book.due(T0 + 6 * S)  # changed: due at once, not at the next re-send
    assert body["labels"] == labels_of(first)  # same alert for Alertmanager
    assert body["annotations"]["summary"] == "worse" and body["annotations"]["severity"] == "critical"
    assert body["startsAt"] == rfc3339(T0)


def test_a_resolution_is_posted_once_with_its_end_time_then_forgotten() -> None:
    book = AlertBook()
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.posted(["a"], T0)
    book.apply(incident(incident_id="a", state="resolved", detected_ns=T0 + 9 * S))
    [(_, body)] = book.due(T0 + 10 * S)
    assert body["endsAt"] == rfc3339(T0 + 9 * S)
    book.posted(["a"], T0 + 10 * S)
    assert book.entries == {} and book.due(T0 + 1000 * S) == []


def test_a_failed_post_leaves_the_alerts_due() -> None:
    book = AlertBook()
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.due(T0)  # taken but never confirmed by posted()
    assert [i for i, _ in book.due(T0 + S)] == ["a"]


def test_replay_rebuilds_what_still_fires_and_drops_what_resolved() -> None:
    book = AlertBook()
    for event in (incident(incident_id="a", detected_ns=T0), incident(incident_id="b", detected_ns=T0),
                  incident(incident_id="b", state="resolved", detected_ns=T0 + S)):
        book.apply(event, replay=True)
    assert sorted(book.entries) == ["a"]
    assert [i for i, _ in book.due(T0 + 2 * S)] == ["a"]  # refreshed once after a restart
    assert book.firing() == 1


def test_a_reopened_incident_fires_again_as_the_same_alert() -> None:
    book = AlertBook()
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.apply(incident(incident_id="a", state="resolved", detected_ns=T0 + S))
    book.apply(incident(incident_id="a", state="update", detected_ns=T0 + 2 * S))
    [(_, body)] = book.due(T0 + 3 * S)
    assert body["endsAt"] > rfc3339(T0 + 3 * S)


def test_alert_names_are_camel_case_and_every_rule_has_a_runbook_section() -> None:
    from schemas.incident import RULE_IDS
    from streams.alerts.mapping import RUNBOOK, alert_name

    assert alert_name("R4") == "SteplensKernelEfficiency" and alert_name("HUNG_HOST") == "SteplensHungHost"
    names = [alert_name(rule) for rule in RULE_IDS]
    assert len(set(names)) == len(names)
    assert all(n.isalnum() and n[0].isupper() and n.startswith("Steplens") for n in names)
    text = RUNBOOK.read_text()
    missing = [rule for rule in RULE_IDS if f'<a id="{rule.lower()}"></a>' not in text]
    assert not missing, f"docs/runbooks.md has no section for {missing}"


def test_generator_url_is_the_live_page_s_incident() -> None:
    book = AlertBook(generator_template="http://127.0.0.1:19480/incident/{incident_id}")
    book.apply(incident(incident_id="i-9", detected_ns=T0))
    [(_, body)] = book.due(T0)
    assert body["generatorURL"] == "http://127.0.0.1:19480/incident/i-9"


def _action(**kw: object) -> MitigationAction:
    base = MitigationAction(action_id="a/drain", incident_id="a", job="train", level="drain", verdict="dry_run",
                            why="partition gpu is not enabled for actions", reason="expected to last 3600 s more",
                            partition="gpu", by="steplens policy", at_ns=T0 + 10 * S, host="node-7", rule="SLOW_HOST",
                            slowdown=0.2, age_s=7000.0, expected_remaining_s=3600.0, history_n=12,
                            keep_cost_gpu_h=12.8, act_cost_gpu_h=9.1)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_mitigation_action_is_one_alert_from_its_dry_run_to_its_approval_and_ends_with_its_undo() -> None:
    book = AlertBook(resend_s=60)
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.apply_action(_action())
    due = dict(book.due(T0 + 11 * S))
    pending = due["action:a/drain"]
    assert pending["labels"] == {"alertname": "SteplensMitigation", "training_job": "train", "incident_id": "a",
                                 "action_id": "a/drain", "level": "drain", "partition": "gpu", "severity": "info",
                                 "host": "node-7"}
    assert pending["annotations"]["command"] == "steplens actions approve a/drain"
    assert "awaiting approval" in pending["annotations"]["summary"]
    assert pending["annotations"]["runbook_url"].endswith("docs/runbooks.md#mitigation")
    book.posted(list(due), T0 + 11 * S)
    book.apply_action(_action(verdict="act", by="oncall", why="approved by oncall", at_ns=T0 + 20 * S))
    [(key, approved)] = book.due(T0 + 21 * S)
    assert key == "action:a/drain" and approved["labels"] == pending["labels"]  # the same alert, updated
    assert approved["annotations"]["command"] == "steplens actions undo a/drain"
    book.posted([key], T0 + 21 * S)
    book.apply_action(_action(action_id="a/drain/undo", level="undo", undoes="a/drain", verdict="act",
                              at_ns=T0 + 30 * S))
    [(key, ended)] = book.due(T0 + 31 * S)
    assert key == "action:a/drain" and ended["endsAt"] == rfc3339(T0 + 30 * S)
    book.posted([key], T0 + 31 * S)
    assert "action:a/drain" not in book.entries


def test_an_incidents_resolution_ends_its_actions_alerts_and_refusals_raise_none() -> None:
    book = AlertBook(resend_s=60)
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.apply_action(_action(verdict="act"))
    book.apply_action(_action(action_id="a/relaunch", level="relaunch", verdict="refused"))
    assert sorted(k for k, _ in book.due(T0 + 11 * S)) == ["a", "action:a/drain"]
    book.apply(incident(incident_id="a", detected_ns=T0 + 40 * S, state="resolved"))
    ends = {k: body["endsAt"] for k, body in book.due(T0 + 41 * S)}
    assert ends == {"a": rfc3339(T0 + 40 * S), "action:a/drain": rfc3339(T0 + 40 * S)}


def test_records_read_after_their_end_do_not_fire_again() -> None:
    """Replayed out of order (the incidents and actions topics are read side by side): an action read after its
    undo, or after its incident's resolution, stays quiet."""
    book = AlertBook(resend_s=60)
    book.apply_action(_action(action_id="a/drain/undo", level="undo", undoes="a/drain", verdict="act"), replay=True)
    book.apply_action(_action(verdict="act"), replay=True)
    book.apply(incident(incident_id="b", detected_ns=T0, state="resolved"), replay=True)
    book.apply_action(_action(action_id="b/drain", incident_id="b", verdict="act"), replay=True)
    assert book.due(T0 + 60 * S) == []


def test_an_action_on_a_reopened_incident_fires() -> None:
    """An update after a resolution fires the incident again (the same alert); its actions must fire too."""
    book = AlertBook(resend_s=60)
    book.apply(incident(incident_id="a", detected_ns=T0))
    book.apply(incident(incident_id="a", detected_ns=T0 + 10 * S, state="resolved"))
    book.apply(incident(incident_id="a", detected_ns=T0 + 20 * S, state="update"))
    book.apply_action(_action(verdict="act", at_ns=T0 + 30 * S))
    assert "action:a/drain" in dict(book.due(T0 + 31 * S))
