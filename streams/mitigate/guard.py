"""Guard rails between a decision and an action: what may be done to a node, and what is only recorded.

Why: a wrong drain costs a healthy node, a wrong relaunch a job's progress; a policy is only trusted when it
cannot run away. Rules, each checked on the partition's live node states before anything is done:
- dry-run unless the partition is enabled (`STEPLENS_MITIGATE_PARTITIONS`): the decision is recorded and
  shown, nothing changes;
- never a node already drained, draining, down or in maintenance (someone else owns it);
- never more than `max_drained_share` of a partition out of service, counting the nodes already out;
- one action per (incident, level): the key a restarted worker finds already done, and the scheduler's own
  record: a node whose reason names the incident (`drain_reason`) was drained for it, whatever the worker
  remembers (a worker killed between the drain and its record does not drain twice).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from streams.mitigate.policy import Decision
from streams.mitigate.scheduler import NodeState

Verdict = Literal["act", "dry_run", "refused", "none"]


@dataclass(frozen=True, slots=True)
class GuardParams:
    enabled_partitions: frozenset[str] = frozenset()  # empty: dry-run everywhere (the default)
    max_drained_share: float = 0.1                   # of a partition's nodes out of service at once


@dataclass(frozen=True, slots=True)
class Checked:
    key: str            # idempotency key: one action per incident and level
    verdict: Verdict
    why: str
    drained: bool = False  # the node is already drained for this incident


def action_key(decision: Decision) -> str:
    return f"{decision.incident_id}/{decision.level}"


def drain_reason(incident_id: str, rule: str, level: str) -> str:
    """The node's reason as the scheduler shows it (`sinfo -R`): names the incident an operator looks up."""
    return f"steplens {incident_id} {rule} {level}"


def drained_for(node: NodeState | None, incident_id: str) -> bool:
    return node is not None and node.reason.startswith(f"steplens {incident_id} ")


def check(decision: Decision, partition: str, nodes: Mapping[str, NodeState], done: Collection[str],
          params: GuardParams) -> Checked:
    """Whether the decision's action may be carried out now on `partition` (its nodes as the scheduler sees
    them), given the keys of actions already taken."""
    key = action_key(decision)
    if decision.level not in ("drain", "relaunch"):
        return Checked(key, "none", f"level {decision.level}: nothing to do to the node")
    if key in done:
        return Checked(key, "none", "already done")
    ours = drained_for(nodes.get(decision.host or ""), decision.incident_id) or (
        f"{decision.incident_id}/drain" in done)
    if ours and decision.level == "drain":
        return Checked(key, "none", "already done: the node is drained for this incident", drained=True)
    refusal = None if ours else node_refusal(decision.host, partition, nodes, params)
    if refusal is not None:
        return Checked(key, "refused", refusal)
    if partition not in params.enabled_partitions:
        return Checked(key, "dry_run", f"partition {partition} is not enabled for actions", drained=ours)
    return Checked(key, "act", "within the guard rails", drained=ours)


def node_refusal(host: str | None, partition: str, nodes: Mapping[str, NodeState], params: GuardParams) -> str | None:
    """Why `host` may not be taken out of service now (None: it may)."""
    node = nodes.get(host or "")
    if node is None:
        return f"{host} is not a node of partition {partition}"
    if not node.available:
        return f"{node.name} is already out of service ({node.state}: {node.reason})"
    out = sum(not n.available for n in nodes.values())
    if out + 1 > params.max_drained_share * len(nodes) + 1e-9:
        return (f"draining {node.name} would take {out + 1} of {len(nodes)} nodes of {partition} out of service "
                f"(at most {params.max_drained_share:.0%})")
    return None
