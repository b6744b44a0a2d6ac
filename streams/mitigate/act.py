"""Carry a decision out: policy → guard rails → the scheduler, and a record of each step, undoable.

Why one place: every action must be explainable after the fact (who, why, on which figures) and reversible
by one command; the record carries the decision's inputs and the guard's verdict whether or not anything
was done, and `undo` reverses exactly what a record says was done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas import Incident
from streams.mitigate.guard import GuardParams, Verdict, check, drain_reason
from streams.mitigate.policy import Decision, JobCosts, PolicyParams, decide
from streams.mitigate.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One decision and what became of it: the row of the audit trail."""

    action_id: str          # incident/level: the idempotency key
    verdict: Verdict        # act (done), dry_run (recorded only), refused (a guard rail), none (nothing to do)
    why: str
    decision: Decision
    partition: str
    by: str = "steplens policy"
    at_ns: int = field(default_factory=time.time_ns)


class Mitigator:
    """Decides and acts on one partition through one scheduler; remembers the keys it has acted on."""

    def __init__(self, scheduler: Scheduler, partition: str, policy: PolicyParams, guard: GuardParams,
                 done: Sequence[str] = ()) -> None:
        self.scheduler = scheduler
        self.partition = partition
        self.policy = policy
        self.guard = guard
        self.done = set(done)

    def handle(self, incident: Incident, costs: JobCosts, durations_s: Sequence[float], now_ns: int,
               scheduler_job: str | None = None) -> ActionRecord:
        """Decide, check, act. A relaunch drains the node (unless this policy already did) and requeues the
        job's scheduler job, so it restarts from its checkpoint on other nodes."""
        decision = decide(incident, costs, durations_s, now_ns, self.policy)
        checked = check(decision, self.partition, self.scheduler.nodes(self.partition), self.done, self.guard)
        if checked.verdict == "act" and decision.host is not None:
            if not checked.drained:
                self.scheduler.drain(decision.host, drain_reason(decision, incident.rule))
            if decision.level == "relaunch" and scheduler_job is not None:
                self.scheduler.requeue(scheduler_job)
            self.done.add(checked.key)
        return ActionRecord(checked.key, checked.verdict, checked.why, decision, self.partition)

    def undo(self, record: ActionRecord, by: str) -> ActionRecord:
        """Resume the node a done action drained; a record of the undo (refused when there is nothing to undo)."""
        if record.verdict != "act" or record.decision.host is None:
            return ActionRecord(f"{record.action_id}/undo", "refused", "that action changed nothing", record.decision,
                                record.partition, by)
        self.scheduler.resume(record.decision.host)
        return ActionRecord(f"{record.action_id}/undo", "act", f"node {record.decision.host} resumed",
                            record.decision, record.partition, by)
