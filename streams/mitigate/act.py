"""Carry a decision out: policy → guard rails → the scheduler, and a record of each step, undoable.

Why one place: every action must be explainable after the fact (who, why, on which figures) and reversible
by one command; the record carries the decision's inputs and the guard's verdict whether or not anything
was done, and `undo` reverses exactly what a record says was done. The record travels as a
`MitigationAction` event (schemas/action.py) on the actions topic and lands in the `actions` table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from schemas import Incident, MitigationAction
from streams.mitigate.guard import GuardParams, Verdict, check, drain_reason, node_refusal
from streams.mitigate.policy import Decision, JobCosts, PolicyParams, decide
from streams.mitigate.scheduler import Scheduler

POLICY = "steplens policy"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One decision and what became of it: the row of the audit trail."""

    action_id: str          # incident/level: the idempotency key
    verdict: Verdict        # act (done), dry_run (recorded only), refused (a guard rail), none (nothing to do)
    why: str
    decision: Decision
    partition: str
    by: str = POLICY
    at_ns: int = field(default_factory=time.time_ns)
    rule: str | None = None
    scheduler_job: str | None = None

    def as_action(self) -> MitigationAction:
        d = self.decision
        return MitigationAction(
            action_id=self.action_id, incident_id=d.incident_id, job=d.job, level=d.level, verdict=self.verdict,
            why=self.why, reason=d.reason, partition=self.partition, by=self.by, at_ns=self.at_ns, host=d.host,
            rule=self.rule, scheduler_job=self.scheduler_job, age_s=d.age_s, slowdown=d.slowdown,
            expected_remaining_s=d.expected_remaining_s, history_n=d.history_n, lost_so_far_gpu_h=d.lost_so_far_gpu_h,
            keep_cost_gpu_h=d.keep_cost_gpu_h, act_cost_gpu_h=d.act_cost_gpu_h)


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
               scheduler_job: str | None = None, slowdown: float | None = None) -> ActionRecord:
        """Decide, check, act. A relaunch drains the node (unless this policy already did) and requeues the
        job's scheduler job (`scheduler_job`, else the scheduler's job named like the steplens job), so it
        restarts from its checkpoint on other nodes."""
        decision = decide(incident, costs, durations_s, now_ns, self.policy, slowdown)
        checked = check(decision, self.partition, self.scheduler.nodes(self.partition), self.done, self.guard)
        if checked.verdict == "act" and decision.host is not None:
            if not checked.drained:
                self.scheduler.drain(decision.host, drain_reason(incident.incident_id, incident.rule, decision.level))
            if decision.level == "relaunch":
                scheduler_job = self._requeue(incident.job, scheduler_job)
            self.done.add(checked.key)
        return ActionRecord(checked.key, checked.verdict, checked.why, decision, self.partition, at_ns=now_ns,
                            rule=incident.rule, scheduler_job=scheduler_job)

    def approve(self, action: MitigationAction, by: str, now_ns: int) -> MitigationAction:
        """Carry out a recorded dry-run decision on an operator's word: the node rails still hold (not one
        already out of service, not past the partition's share); only the partition's dry-run is lifted."""
        if action.verdict != "dry_run" or action.level not in ("drain", "relaunch") or action.host is None:
            return replace(action, verdict="refused", why="only a dry-run drain or relaunch can be approved",
                           by=by, at_ns=now_ns)
        nodes = self.scheduler.nodes(self.partition)
        refusal = node_refusal(action.host, self.partition, nodes, self.guard)
        if refusal is not None:
            return replace(action, verdict="refused", why=f"approval refused: {refusal}", by=by, at_ns=now_ns)
        self.scheduler.drain(action.host, drain_reason(action.incident_id, action.rule or "", action.level))
        job = self._requeue(action.job, action.scheduler_job) if action.level == "relaunch" else action.scheduler_job
        self.done.add(action.action_id)
        return replace(action, verdict="act", why=f"approved by {by}", by=by, at_ns=now_ns, scheduler_job=job)

    def _requeue(self, job: str, scheduler_job: str | None) -> str | None:
        """Requeue the job's scheduler job (`scheduler_job`, else the one named like the steplens job): it
        restarts from its checkpoint on nodes other than the drained one. Its id, None when there is none."""
        scheduler_job = scheduler_job or self.scheduler.job_named(job)
        if scheduler_job is not None:
            self.scheduler.requeue(scheduler_job)
        return scheduler_job

    def undo(self, action: MitigationAction, by: str, now_ns: int | None = None) -> MitigationAction:
        """Resume the node a done action drained; a record of the undo (refused when there is nothing to undo)."""
        at = time.time_ns() if now_ns is None else now_ns
        undo = replace(action, action_id=f"{action.action_id}/undo", level="undo", undoes=action.action_id, by=by,
                       at_ns=at)
        if action.verdict != "act" or action.host is None or action.level not in ("drain", "relaunch"):
            return replace(undo, verdict="refused", why="that action changed nothing")
        self.scheduler.resume(action.host)
        return replace(undo, verdict="act", why=f"node {action.host} resumed")
