"""Mitigation actions: what the policy decided for a culprit incident and what was done.

Why an event: an action must happen once per decision across worker restarts and rebalances, and be
audited after the fact. The mitigation worker writes one record per (action_id, verdict) to the actions
topic, keyed by `incident_id` (an action, its approval and its undo stay in order on one partition); a
restarted worker reads the topic back to know what it has done, and the land worker keeps every record in
the `actions` table (who, why, on which figures), where `steplens actions` lists, approves and undoes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from schemas.decoding import join, require

ActionLevel = Literal["notify", "profile", "drain", "relaunch", "undo"]
# act: carried out; dry_run: recorded only (the partition is not enabled: an operator may approve it);
# refused: a guard rail stopped it; none: nothing to do to a node at this level
ActionVerdict = Literal["act", "dry_run", "refused", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MitigationAction:
    """One decision on one culprit incident, with the figures it rests on (GPU-hours) and its outcome.

    `action_id` is `<incident_id>/<level>` (an undo: `<action_id>/undo`): the idempotency key.
    """

    TYPE: ClassVar[str] = "action"

    action_id: str
    incident_id: str
    job: str
    level: ActionLevel
    verdict: ActionVerdict
    why: str                     # the guard's verdict, in words
    reason: str                  # the policy's reason for the level
    partition: str
    by: str                      # "steplens policy", or the operator who approved or undid it
    at_ns: int
    host: str | None = None
    rule: str | None = None
    scheduler_job: str | None = None
    age_s: float = 0.0
    slowdown: float = 0.0
    expected_remaining_s: float = 0.0
    history_n: int = 0
    lost_so_far_gpu_h: float = 0.0
    keep_cost_gpu_h: float = 0.0
    act_cost_gpu_h: float = 0.0
    undoes: str | None = None    # for an undo: the action it reverses

    def check(self, path: str) -> None:
        for name in ("action_id", "incident_id", "job", "partition", "by"):
            require(bool(getattr(self, name)), join(path, name), "must not be empty")
        require(self.at_ns >= 0, join(path, "at_ns"), "must be >= 0")
        require(self.history_n >= 0, join(path, "history_n"), "must be >= 0")
        require((self.level == "undo") == (self.undoes is not None), join(path, "undoes"),
                "names the action an undo reverses, and only an undo's")
        for name in ("host", "rule", "scheduler_job", "undoes"):
            require(getattr(self, name) is None or bool(getattr(self, name)), join(path, name),
                    "must not be empty (leave it out instead)")
