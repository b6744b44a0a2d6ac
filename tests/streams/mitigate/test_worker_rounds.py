"""The mitigation worker's rounds (pure: the book and one round of weighing, a scheduler that keeps node
states in memory): each decision recorded once, an action done before a crash found and recorded, never
done again, the fleet's history and relaunch times read from the topics' events."""

from __future__ import annotations

import dataclasses

from infra.settings import Settings
from schemas import Incident, JobEvent, MitigationAction
from streams.advice import advise
from streams.mitigate.book import MitigationBook
from streams.mitigate.scheduler import MemoryScheduler
from streams.mitigate.worker import MitigationWorker

S = 1_000_000_000
T0 = 1_800_000_000 * S


def slow_host(host: str, incident_id: str, state: str = "open", detected_ns: int = T0) -> Incident:
    return Incident(incident_id=incident_id, job="train", rule="SLOW_HOST", state=state,  # type: ignore[arg-type]
                    severity="warning", scope="host", summary=f"{host} slow", detected_ns=detected_ns, host=host,
                    observed=1.25, expected=1.0, cause=advise("backward_ms").cause)


def worker(scheduler: MemoryScheduler, enabled: bool = True) -> tuple[MitigationWorker, list[MitigationAction]]:
    settings = dataclasses.replace(Settings(), mitigate_partition="p", mitigate_enabled="p" if enabled else "",
                                   mitigate_max_drained_share=0.25)
    w = MitigationWorker(settings, scheduler, once=True)
    return w, []


def long_history(book: MitigationBook, n: int = 10) -> None:
    for i in range(n):
        book.on_incident(slow_host("old", f"old-{i}", "resolved", detected_ns=T0 - 10 * 3600 * S), T0 - 6 * 3600 * S)


def test_a_persistent_slow_host_is_profiled_then_drained_and_each_decision_is_recorded_once() -> None:
    nodes = MemoryScheduler(["n1", "n2", "n3", "n4"])
    w, sent = worker(nodes)
    long_history(w.book)
    w.book.on_job(JobEvent(job="train", phase="start", world=16, ts_ns=T0 - 3600 * S))
    w.book.on_incident(slow_host("n2", "inc-1"), T0)
    for age_s in (10, 20, 6100, 6130, 6160):  # break-even: (900 + 300) s / 20 % = 6,000 s
        w.tick(T0 + age_s * S, lambda a: sent.append(a) or True)
    assert [(a.level, a.verdict) for a in sent] == [("profile", "none"), ("drain", "act")]
    assert nodes.calls == [("drain", "n2")]
    drained = sent[1]
    assert drained.host == "n2" and drained.history_n == 10 and drained.keep_cost_gpu_h > 0
    assert nodes.states["n2"].reason == "steplens inc-1 SLOW_HOST drain"
    # and its self-metrics say so (served on STEPLENS_MITIGATE_METRICS_PORT)
    value = w.metrics.registry.get_sample_value
    assert value("steplens_mitigate_rounds_total") == 5 and value("steplens_mitigate_open_incidents") == 1
    assert value("steplens_mitigate_actions_total", {"verdict": "act", "level": "drain"}) == 1
    assert value("steplens_mitigate_actions_total", {"verdict": "none", "level": "profile"}) == 1
    assert value("steplens_mitigate_last_round_timestamp_seconds") == (T0 + 6160 * S) / 1e9


def test_an_action_done_but_not_recorded_before_a_crash_is_recorded_and_not_done_again() -> None:
    nodes = MemoryScheduler(["n1", "n2", "n3", "n4"])
    nodes.drain("n2", "steplens inc-1 SLOW_HOST drain")  # the killed worker drained, then died before its record
    nodes.calls.clear()
    w, sent = worker(nodes)
    long_history(w.book)
    w.book.on_incident(slow_host("n2", "inc-1"), T0)
    w.tick(T0 + 6100 * S, lambda a: sent.append(a) or True)
    assert [(a.level, a.verdict) for a in sent] == [("drain", "act")] and sent[0].why.startswith("found done")
    assert nodes.calls == []
    w.book.on_action(sent[0])
    w.tick(T0 + 6160 * S, lambda a: sent.append(a) or True)
    assert len(sent) == 1


def test_a_restarted_worker_that_read_its_records_back_neither_acts_nor_records_again() -> None:
    nodes = MemoryScheduler(["n1", "n2", "n3", "n4"])
    first, sent = worker(nodes)
    long_history(first.book)
    first.book.on_incident(slow_host("n2", "inc-1"), T0)
    first.tick(T0 + 6100 * S, lambda a: sent.append(a) or True)
    nodes.resume("n2")  # an operator undid it: the policy must not drain it again for the same incident
    restarted, again = worker(nodes)
    long_history(restarted.book)
    restarted.book.on_incident(slow_host("n2", "inc-1"), T0)
    for action in sent:
        restarted.book.on_action(action)
    restarted.tick(T0 + 6200 * S, lambda a: again.append(a) or True)
    assert again == [] and nodes.calls == [("drain", "n2"), ("resume", "n2")]


def test_dry_run_records_the_decision_once_and_changes_nothing() -> None:
    nodes = MemoryScheduler(["n1", "n2", "n3", "n4"])
    w, sent = worker(nodes, enabled=False)
    long_history(w.book)
    w.book.on_incident(slow_host("n2", "inc-1"), T0)
    for t in (6100, 6130):
        w.tick(T0 + t * S, lambda a: (sent.append(a), w.book.on_action(a)) and True)
    assert [(a.level, a.verdict) for a in sent] == [("drain", "dry_run")] and nodes.calls == []


def test_a_resolved_incident_is_no_longer_weighed_and_its_duration_joins_the_history() -> None:
    book = MitigationBook()
    book.on_incident(slow_host("n2", "inc-1"), T0)
    book.on_incident(slow_host("n3", "inc-2", detected_ns=T0 + 100 * S), T0 + 100 * S)
    book.on_incident(slow_host("n2", "inc-1", "resolved"), T0 + 600 * S)
    assert list(book.open) == ["inc-2"]
    assert book.history(slow_host("n9", "inc-9"), T0 + 700 * S) == [600.0, 600.0]  # inc-1 lasted; inc-2 is open


def test_relaunch_time_is_measured_from_the_jobs_attempts() -> None:
    book = MitigationBook()
    assert book.costs("j").relaunch_s == 300.0 and book.costs("j").job_gpus == 8  # the priors
    book.on_job(JobEvent(job="j", phase="start", world=64, ts_ns=T0))
    book.on_job(JobEvent(job="j", phase="end", world=64, ts_ns=T0 + 3600 * S))
    book.on_job(JobEvent(job="j", phase="start", world=56, ts_ns=T0 + 3720 * S, attempt=1))
    costs = book.costs("j")
    assert costs.relaunch_s == 120.0 and costs.job_gpus == 56 and costs.since_checkpoint_s == 900.0


def test_a_drain_the_scheduler_refuses_is_counted_and_weighed_again_next_round() -> None:
    from streams.mitigate.scheduler import SchedulerError

    class Unreachable(MemoryScheduler):
        def drain(self, node: str, reason: str) -> None:
            raise SchedulerError("scontrol: slurm_update error: Unable to contact slurm controller")

    nodes = Unreachable(["n1", "n2", "n3", "n4"])
    w, sent = worker(nodes)
    long_history(w.book)
    w.book.on_job(JobEvent(job="train", phase="start", world=16, ts_ns=T0 - 3600 * S))
    w.book.on_incident(slow_host("n2", "inc-1"), T0)
    for age_s in (6100, 6130):
        w.tick(T0 + age_s * S, lambda a: sent.append(a) or True)
    assert [a.verdict for a in sent if a.level == "drain"] == [], "nothing recorded as done"
    assert w.stats.scheduler_errors == 2  # tried again the next round
    assert w.metrics.registry.get_sample_value("steplens_mitigate_scheduler_errors_total") == 2


def test_the_jobs_own_checkpoint_period_replaces_the_setting_once_its_incidents_carry_it() -> None:
    book = MitigationBook()
    book.on_incident(slow_host("n2", "inc-1"), T0)
    assert book.costs("train").since_checkpoint_s == 1800.0 / 2  # the setting (STEPLENS_MITIGATE_CHECKPOINT_...)
    measured = dataclasses.replace(slow_host("n2", "inc-1"), evidence={"checkpoint_every_steps": 500.0,
                                                                        "baseline_step_ms": 1200.0})
    book.on_incident(measured, T0 + 60 * S)
    assert book.costs("train").since_checkpoint_s == 500 * 1.2 / 2  # every 600 s: half of it lost on average
    assert book.costs("other").since_checkpoint_s == 1800.0 / 2
