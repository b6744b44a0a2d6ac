"""Act or wait: one decision per open culprit incident, with the figures it rests on.

Why: a slow node costs every GPU of its job for as long as the fault lasts, and acting costs too: the work
since the last checkpoint, the relaunch, and the node's capacity while it is out. This is the ski-rental
problem Greyhound (ATC'25) answers for fail-slows: keep paying the slowdown while the fault is expected to
end soon, act once waiting is expected to cost more than acting. Nothing is done before the fault's
break-even age ((time since checkpoint + relaunch) / slowdown: the duration below which waiting costs the job
less than a relaunch), so a transient shorter than that is never acted on, whatever the history predicts.
The expected remaining duration comes from the fleet's history of the same fault class (mean residual life
of past incidents' durations, given the age this one has reached); with no history a prior stands in. The
slowdown is the job's measured one where the caller has it (its step times since the incident against
before, `measured_slowdown`), else the incident's own figures (`slowdown_of`). Whatever the history says,
acting is never put off past the point where the loss already paid equals the cost of acting (the
deterministic 2-competitive rule), so a wrong history costs at most twice the optimum.

Levels, each including the ones before: `notify` (always) → `profile` (the detect worker already asks the
culprit for one) → `drain` (the node takes no new work: costs nothing to the running job) → `relaunch` (ask
the job's launcher to restart from its checkpoint without the node). Only a node's own faults are drained;
a data loader, GC pauses, a leak or a job's configuration follow the node wherever it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from schemas import Incident
from streams.advice import CAUSES, RULES, advise

Level = Literal["notify", "profile", "drain", "relaunch"]
LEVELS: tuple[Level, ...] = ("notify", "profile", "drain", "relaunch")

# rules whose culprit is a node's hardware: its host, a device or a NIC/link of it
NODE_RULES = frozenset({"SLOW_HOST", "HUNG_HOST", "SLOW_LINK", "SLOW_RANK", "R1", "R2", "R4", "R5"})
# rules whose observed figure is an efficiency against a benchmark (lower is worse)
EFFICIENCY_RULES = frozenset({"R4"})
# causes no drain fixes: they are the job's software or its inputs, and follow it to any node
SOFTWARE_CAUSES = frozenset(
    [advise("gc_ms").cause, advise("data_ms").cause]
    + [CAUSES[c].cause for c in ("gc", "slow_reading", "slow_processing", "slow_fetching", "compilation",
                                 "dispatch", "sync_ops", "poor_parallelism", "fragmentation") if c in CAUSES]
    + [RULES["OOM"].cause]
)


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """The policy's knobs (documented in docs/operations.md#mitigation)."""

    min_age_s: float = 120.0             # no action on a fault younger than this: most transients end sooner
    drain_after_remaining_s: float = 600.0  # drain for new work once the fault is expected to last this long
    prior_remaining_s: float = 3600.0    # expected remaining duration when the fleet has no history to go by
    min_history: int = 5                 # past incidents needed (older than this one's age) to trust history


@dataclass(frozen=True, slots=True)
class JobCosts:
    """What acting costs the job: measured by steplens (the last checkpoint step, the last relaunch)."""

    job_gpus: int
    since_checkpoint_s: float   # work lost on a relaunch: time since the job's last checkpoint
    relaunch_s: float           # measured time from a kill to the first step of the next attempt
    node_gpus: int = 8          # capacity taken out with the node while it is drained


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision and everything it rests on (GPU-hours), recorded whatever the level."""

    incident_id: str
    job: str
    host: str | None
    level: Level
    reason: str
    age_s: float
    slowdown: float                # share of the job's throughput lost: 1 - expected / observed step time
    expected_remaining_s: float
    history_n: int                 # past incidents of the class that outlived this one's age
    lost_so_far_gpu_h: float       # slowdown x GPUs x age: already paid
    keep_cost_gpu_h: float         # slowdown x GPUs x expected remaining: what waiting is expected to cost
    act_cost_gpu_h: float          # GPUs x (since checkpoint + relaunch) + node GPUs x expected remaining


def fault_class(incident: Incident) -> str:
    """The class whose history predicts this fault's duration: the rule and, where a phase names it, the cause."""
    return f"{incident.rule}/{incident.cause or ''}"


def drainable(incident: Incident) -> str | None:
    """None when a drain can fix the culprit; else why not."""
    if incident.rule not in NODE_RULES:
        return f"{incident.rule} is not a node's fault"
    if incident.host is None:
        return "the incident names no host"
    if incident.cause in SOFTWARE_CAUSES:
        return f"a drain does not fix {incident.cause!r}: it follows the job to any node"
    return None


def slowdown_of(incident: Incident) -> float:
    """Share of the job's throughput the fault costs, from the incident's own figures (0 when it gives none).

    A hung host stops the job outright (1.0). A culprit's busy time against its group's median (evidence
    `busy_ms`, `group_median_ms`: a synchronous job runs at its slowest member's pace) gives 1 - median / busy.
    Otherwise the incident's observed and expected figures: an efficiency (R4: lower is worse) gives
    1 - observed / expected, a time (larger is worse) 1 - expected / observed. A link's figure is its transfer
    time against its own: an upper bound on the job's loss, which also computes."""
    if incident.rule == "HUNG_HOST":
        return 1.0
    busy, median = incident.evidence.get("busy_ms"), incident.evidence.get("group_median_ms")
    if busy is not None and median is not None and busy > 0:
        return _share(1.0 - median / busy)
    if incident.observed is None or incident.expected is None or incident.observed <= 0 or incident.expected <= 0:
        return 0.0
    if incident.rule in EFFICIENCY_RULES:
        return _share(1.0 - incident.observed / incident.expected)
    return _share(1.0 - incident.expected / incident.observed)


def _share(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def expected_remaining_s(durations_s: Sequence[float], age_s: float, params: PolicyParams) -> tuple[float, int]:
    """Mean residual life: E[D - age | D > age] over the fleet's past durations of the class, and how many
    outlived `age`. Faults still open count at their age so far (a lower bound). Too few: the prior."""
    past = np.asarray(durations_s, dtype=np.float64)
    longer = past[past > age_s]
    if len(longer) < params.min_history:
        return params.prior_remaining_s, len(longer)
    return float(np.mean(longer - age_s)), len(longer)


def decide(incident: Incident, costs: JobCosts, durations_s: Sequence[float], now_ns: int,
           params: PolicyParams, slowdown: float | None = None) -> Decision:
    """The level for one open culprit incident at `now_ns`, given its class's past durations and, where known,
    the job's measured slowdown."""
    age_s = max(0.0, (now_ns - incident.detected_ns) / 1e9)
    slowdown = slowdown_of(incident) if slowdown is None else _share(slowdown)
    remaining, history_n = expected_remaining_s(durations_s, age_s, params)
    hours = 1 / 3600
    lost = slowdown * costs.job_gpus * age_s * hours
    keep = slowdown * costs.job_gpus * remaining * hours
    act = (costs.job_gpus * (costs.since_checkpoint_s + costs.relaunch_s) + costs.node_gpus * remaining) * hours

    def made(level: Level, reason: str) -> Decision:
        return Decision(incident.incident_id, incident.job, incident.host, level, reason, age_s, slowdown,
                        remaining, history_n, lost, keep, act)

    why_not = drainable(incident)
    if why_not is not None:
        return made("notify", why_not)
    if age_s < params.min_age_s:
        return made("profile", f"younger than {params.min_age_s:.0f} s: most transients end sooner")
    break_even = (costs.since_checkpoint_s + costs.relaunch_s) / slowdown if slowdown > 0 else float("inf")
    if age_s < break_even:
        return made("profile", f"younger than its break-even ({break_even:.0f} s): were it to end now, waiting "
                               "cost less than acting")
    if lost >= act:
        return made("relaunch", "the loss already paid reached the cost of acting (ski rental: at most 2x)")
    if keep > act:
        return made("relaunch", "waiting is expected to cost more than relaunching without the node")
    if remaining >= params.drain_after_remaining_s:
        return made("drain", f"expected to last {remaining:.0f} s more: keep new work off the node")
    return made("profile", "expected to end before acting pays")


def measured_slowdown(step_ms: Sequence[tuple[int, float]], step_first: int | None,
                      step_last: int | None) -> float | None:
    """The job's throughput lost over the incident's steps: 1 - median step time before `step_first` / mean
    step time over [step_first, step_last] (the job's pace: its slowest rank's step time). None when either
    side has fewer than 3 steps (a job slow from its start has no before: the incident's figures stand).

    The before side is a median: the job's healthy pace, whatever warm-up or one-off spike it held. The
    during side is a mean, because the job pays every step's time: a fault that throttles 3 steps in 8 by a
    third costs ~12 % of the throughput while the median step of its window is a healthy one."""
    if step_first is None:
        return None
    before = [ms for step, ms in step_ms if step < step_first]
    during = [ms for step, ms in step_ms if step >= step_first and (step_last is None or step <= step_last)]
    if len(before) < 3 or len(during) < 3:
        return None
    return _share(1.0 - float(np.median(before)) / float(np.mean(during)))
