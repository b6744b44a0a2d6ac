"""The pure parts of `make chaos-cluster` (bench/chaos_cluster.py) and the totals it shares with `make chaos`.

No cluster here: the KRaft leader from quorum-state documents, the topology summary from what the
brokers and `system.clusters` describe, alert latency over an outage window, the run's totals and
the live alert reader's filter on real encoded incidents.
"""

from __future__ import annotations

from typing import Any

from bench.chaos import Sent, repeated_opens, summarize
from bench.chaos_cluster import AlertClock, cluster_summary, controller_leader, latency_stats, topology_summary
from infra.settings import Settings
from schemas import Incident, encode


def _state(leader: int, epoch: int) -> dict[str, Any]:
    return {"clusterId": "", "leaderId": leader, "leaderEpoch": epoch, "votedId": -1, "appliedOffset": 0,
            "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}


def test_controller_leader_is_the_newest_epochs() -> None:
    # node 2 was down through the last election and still names the old leader
    assert controller_leader([_state(1, 9), _state(3, 8), _state(1, 9)]) == (1, 9)
    assert controller_leader([_state(3, 8), _state(2, 10)]) == (2, 10)


def test_controller_leader_ignores_files_without_one() -> None:
    assert controller_leader([_state(-1, 4)]) is None
    assert controller_leader([]) is None
    assert controller_leader([_state(-1, 12), _state(3, 11)]) == (3, 11)


def test_topology_summary_of_the_loopback_cluster() -> None:
    got = topology_summary(brokers=3, replicas=[3] * 28, min_isr=[2] * 7,
                           shard_replicas=[(1, 1), (1, 2), (2, 1), (2, 2)],
                           workers=["detect1", "detect2", "land1", "land2"], partitions=[4] * 7)
    assert got == {"brokers": 3, "replication_factor": 3, "min_insync_replicas": 2, "partitions": 4, "shards": 2,
                   "replicas_per_shard": 2, "workers_per_role": {"detect": 2, "land": 2}}


def test_topology_summary_shows_a_spread_as_a_range() -> None:
    got = topology_summary(brokers=3, replicas=[3, 3, 2], min_isr=[2, 1], shard_replicas=[(1, 1), (1, 2), (2, 1)],
                           workers=["land"], partitions=[])
    assert got["replication_factor"] == "2-3" and got["min_insync_replicas"] == "1-2"
    assert got["replicas_per_shard"] == "1-2" and got["partitions"] is None
    assert got["workers_per_role"] == {"land": 1}


def test_latency_over_an_outage_window() -> None:
    sent_at = {20: 100.0, 30: 105.0, 40: 110.0, 50: 115.0}
    seen = {20: 100.4, 30: 107.0, 50: 115.5}  # step 40's alert never came
    during = latency_stats(sent_at, seen, (104.0, 112.0))
    assert during["probes"] == 2 and during["missed"] == 1
    assert during["p99_s"] == during["max_s"] == 2.0 and during["p50_s"] == 2.0
    whole = latency_stats(sent_at, seen)
    assert whole["probes"] == 4 and whole["missed"] == 1 and whole["max_s"] == 2.0
    assert whole["p50_s"] == 0.5


def test_latency_without_probes_is_none_not_zero() -> None:
    got = latency_stats({20: 100.0}, {20: 100.5}, (200.0, 230.0))
    assert got == {"probes": 0, "p50_s": None, "p99_s": None, "max_s": None, "missed": 0}


def _case(**kw: Any) -> dict[str, Any]:
    return {"lost": 0, "duplicates": 0, "duplicate_incidents": 0, "workers_alive": True, **kw}


def test_summary_totals_and_failed_cases() -> None:
    got = summarize({"a": _case(lost=2, duplicates=1), "b": _case(duplicate_incidents=1, workers_alive=False),
                     "c": {"error": "RuntimeError('x')", "workers_alive": False}})
    assert got == {"failed_cases": ["c"], "lost_total": 2, "duplicates_total": 1, "duplicate_incidents_total": 1,
                   "all_workers_alive": False}


def test_cluster_summary_judges_alerts_with_a_broker_down() -> None:
    cases = {"broker_kill": _case(alert_p99_outage_s=1.2, recovery_s=3.0),
             "broker_stop": _case(alert_p99_outage_s=4.1, alerts_missed=2, recovery_s=5.5),
             "replica_kill": _case(alert_p99_outage_s=9.0, recovery_s=1.0)}  # not a broker case: not judged
    got = cluster_summary(cases)
    assert got["alert_p99_broker_down_s"] == 4.1 and got["alerts_within_5s"] is True
    assert got["alerts_missed_total"] == 2 and got["lost_total"] == 0
    assert got["recovery_s"] == {"broker_kill": 3.0, "broker_stop": 5.5, "replica_kill": 1.0}


def test_cluster_summary_fails_a_broker_case_without_a_figure_or_over_target() -> None:
    assert cluster_summary({"broker_kill": _case(alert_p99_outage_s=None)})["alerts_within_5s"] is False
    assert cluster_summary({"broker_kill": _case(alert_p99_outage_s=5.2)})["alerts_within_5s"] is False
    assert cluster_summary({"replica_kill": _case(alert_p99_outage_s=0.2)})["alerts_within_5s"] is False


def _incident(iid: str, state: str, step: int, job: str = "chaos-x-probe", rule: str = "SLOW_STEP") -> Incident:
    return Incident(incident_id=iid, job=job, rule=rule, state=state, severity="warning",  # type: ignore[arg-type]
                    scope="job", summary="slow step", detected_ns=1, step_first=step, step_last=step, rules=[rule])


def test_repeated_opens_count_every_page_beyond_the_first() -> None:
    alerts = [_incident("a", "open", 20), _incident("a", "update", 21), _incident("a", "open", 22),
              _incident("b", "open", 30), _incident("a", "open", 23), _incident("b", "resolved", 31)]
    assert repeated_opens(alerts) == 2


def test_sent_merge_adds_another_senders_counts() -> None:
    a = Sent(steps={("j", 1, 0)}, jobs={("j", "start")}, malformed={"steps": 2}, dropped=1)
    b = Sent(steps={("k", 1, 0), ("j", 1, 0)}, jobs={("k", "start")}, malformed={"steps": 1, "jobs": 3},
             emitter_pending=4)
    a.merge(b)
    assert a.valid == 4 and a.malformed == {"steps": 3, "jobs": 3} and a.dropped == 1 and a.emitter_pending == 4


def test_alert_clock_keeps_the_first_slow_step_alert_of_its_job(tmp_path: Any) -> None:
    clock = AlertClock(Settings(home=tmp_path), "incidents", "chaos-x-probe")
    clock._note(encode(_incident("a", "open", 20)), 10.0)
    clock._note(encode(_incident("a", "update", 20)), 11.0)  # the first arrival counts
    clock._note(encode(_incident("a", "update", 30)), 12.0)
    clock._note(encode(_incident("a", "resolved", 40)), 13.0)  # a resolve is not a detection
    clock._note(encode(_incident("o", "open", 50, job="other")), 14.0)
    clock._note(encode(_incident("r", "open", 60, rule="SLOW_RANK")), 15.0)
    clock._note(b"not json", 16.0)
    assert clock.seen == {20: 10.0, 30: 12.0}
    assert set(clock.detected) == {20, 30}  # the engine's own time of each, for the split of the latency
