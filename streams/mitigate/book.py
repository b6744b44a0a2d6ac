"""What the mitigation worker knows, rebuilt from the topics it reads: no state of its own to lose.

Why from the topics: the worker must act once per decision across restarts and rebalances. Its whole
memory is three low-volume topics read from their beginning at every start:
- `incidents`: the open culprit incidents, and the fleet's history of each fault class (how long past
  incidents lasted, from their `detected_ns` to the record that resolved them; those still open count at
  their age so far, a lower bound), which the policy's expected remaining duration comes from, and each
  job's checkpoint period where the detector saw its rhythm (a relaunch loses half of it on average);
- `jobs`: each job's world (its GPUs) and the measured relaunch time (the end of one attempt to the start
  of the next, across the fleet);
- `actions`: what it (or an operator) already did, by idempotency key.
Pure: events in, figures out; the clock is passed in.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from schemas import Incident, JobEvent, MitigationAction
from streams.mitigate.policy import JobCosts, fault_class

MAX_HISTORY = 10_000  # durations kept per fault class (the newest)
MAX_GAPS = 1_000      # relaunch times kept (the newest)


@dataclass(frozen=True, slots=True)
class CostPriors:
    """What steplens cannot measure from the topics, documented in docs/operations.md#mitigation."""

    checkpoint_interval_s: float = 1800.0  # a relaunch loses half a checkpoint period of work, on average
    #                                        (a job whose incidents carry no measured period)
    relaunch_s: float = 300.0              # until the fleet has measured relaunches of its own
    node_gpus: int = 8
    job_gpus: int = 8                      # a job whose start was not seen


@dataclass(slots=True)
class MitigationBook:
    priors: CostPriors = field(default_factory=CostPriors)
    open: dict[str, Incident] = field(default_factory=dict)          # incident id -> its latest version
    durations: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # class -> seconds
    worlds: dict[str, int] = field(default_factory=dict)             # job -> world of its latest attempt
    ended_ns: dict[str, int] = field(default_factory=dict)           # job -> its last attempt's end
    relaunch_gaps: list[float] = field(default_factory=list)
    actions: dict[str, MitigationAction] = field(default_factory=dict)  # action id -> its latest record
    checkpoint_s: dict[str, float] = field(default_factory=dict)     # job -> its checkpoint period, measured

    def on_incident(self, incident: Incident, at_ns: int) -> None:
        """An incident record written at `at_ns` (the record's timestamp)."""
        every, step_ms = incident.evidence.get("checkpoint_every_steps"), incident.evidence.get("baseline_step_ms")
        if every and step_ms:  # the job's rhythm (streams/detect/scopes/rhythm.py): checkpoints this far apart
            self.checkpoint_s[incident.job] = every * step_ms / 1000
        if incident.state == "resolved":
            self.open.pop(incident.incident_id, None)
            past = self.durations[fault_class(incident)]
            past.append(max(0.0, (at_ns - incident.detected_ns) / 1e9))
            del past[:-MAX_HISTORY]
        else:
            self.open[incident.incident_id] = incident

    def on_job(self, event: JobEvent) -> None:
        if event.phase == "start":
            self.worlds[event.job] = event.world
            ended = self.ended_ns.pop(event.job, None)
            if event.attempt > 0 and ended is not None and event.ts_ns > ended:
                self.relaunch_gaps.append((event.ts_ns - ended) / 1e9)
                del self.relaunch_gaps[:-MAX_GAPS]
        else:
            self.ended_ns[event.job] = event.ts_ns

    def on_action(self, action: MitigationAction) -> None:
        self.actions[action.action_id] = action

    def done(self) -> list[str]:
        """The keys of the actions carried out (an undo does not make its action due again)."""
        return [k for k, a in self.actions.items() if a.verdict == "act"]

    def verdict(self, action_id: str) -> str | None:
        """The last verdict recorded under an action id (None: none yet)."""
        action = self.actions.get(action_id)
        return None if action is None else action.verdict

    def history(self, incident: Incident, now_ns: int) -> list[float]:
        """Past durations of the incident's fault class, with the other open ones of the class at their age."""
        cls = fault_class(incident)
        still_open = [max(0.0, (now_ns - o.detected_ns) / 1e9) for o in self.open.values()
                      if o.incident_id != incident.incident_id and fault_class(o) == cls]
        return [*self.durations.get(cls, []), *still_open]

    def costs(self, job: str) -> JobCosts:
        relaunch = statistics.median(self.relaunch_gaps) if self.relaunch_gaps else self.priors.relaunch_s
        return JobCosts(job_gpus=self.worlds.get(job, self.priors.job_gpus),
                        since_checkpoint_s=self.checkpoint_s.get(job, self.priors.checkpoint_interval_s) / 2,
                        relaunch_s=relaunch,
                        node_gpus=self.priors.node_gpus)
