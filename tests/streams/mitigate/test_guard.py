"""The guard rails (pure): dry-run by default, never a node already out, a share cap, one action per key."""

from __future__ import annotations

from dataclasses import replace

from streams.mitigate.guard import GuardParams, action_key, check
from streams.mitigate.policy import Decision
from streams.mitigate.scheduler import NodeState, parse_sinfo

DECISION = Decision("inc-1", "job", "n1", "drain", "expected to last", 900.0, 0.2, 3600.0, 10, 1.0, 2.0, 3.0)
ENABLED = GuardParams(enabled_partitions=frozenset({"p"}), max_drained_share=0.25)


def nodes(*states: str) -> dict[str, NodeState]:
    return {f"n{i + 1}": NodeState(f"n{i + 1}", s, "") for i, s in enumerate(states)}


def test_dry_run_unless_the_partition_is_enabled() -> None:
    ok = nodes("allocated", "idle", "idle", "idle")
    assert check(DECISION, "p", ok, (), replace(ENABLED, enabled_partitions=frozenset())).verdict == "dry_run"
    assert check(DECISION, "p", ok, (), GuardParams()).verdict == "refused"  # by default 10 %: not 1 of 4
    assert check(DECISION, "p", ok, (), ENABLED).verdict == "act"


def test_never_a_node_already_out_of_service_and_never_past_the_share() -> None:
    assert check(DECISION, "p", nodes("drained", "idle", "idle", "idle"), (), ENABLED).verdict == "refused"
    assert check(DECISION, "p", nodes("down*", "idle", "idle", "idle"), (), ENABLED).verdict == "refused"
    one_out = check(DECISION, "p", nodes("idle", "drained", "idle", "idle"), (), ENABLED)
    assert one_out.verdict == "refused" and "2 of 4" in one_out.why
    assert check(DECISION, "p", nodes("idle"), (), ENABLED).verdict == "refused"  # the only node: 100 %
    assert check(DECISION, "q", nodes("idle", "idle"), (), ENABLED).verdict == "refused"  # 1 of 2 > 25 %


def test_one_action_per_incident_and_level_and_none_below_drain() -> None:
    ok = nodes("allocated", "idle", "idle", "idle")
    assert check(DECISION, "p", ok, {action_key(DECISION)}, ENABLED).verdict == "none"
    assert check(replace(DECISION, level="relaunch"), "p", ok, {action_key(DECISION)}, ENABLED).verdict == "act"
    assert check(replace(DECISION, level="profile"), "p", ok, (), ENABLED).verdict == "none"


def test_sinfo_lines_parse_into_node_states() -> None:
    out = "n1|allocated|none\nn2|drained|steplens inc-1 SLOW_HOST\nn3|down*|Not responding\nn1|allocated|none\n"
    got = parse_sinfo(out)
    assert got["n2"].reason == "steplens inc-1 SLOW_HOST" and not got["n2"].available
    assert got["n1"].available and got["n1"].reason == "" and not got["n3"].available and len(got) == 3


def test_a_node_whose_reason_names_the_incident_is_not_drained_again_after_a_restart() -> None:
    drained = {**nodes("allocated", "idle", "idle", "idle"),
               "n1": NodeState("n1", "draining", "steplens inc-1 SLOW_HOST drain")}
    again = check(DECISION, "p", drained, (), ENABLED)  # a fresh worker: nothing in `done`
    assert again.verdict == "none" and again.drained
    relaunch = check(replace(DECISION, level="relaunch"), "p", drained, (), ENABLED)
    assert relaunch.verdict == "act" and relaunch.drained  # requeue only: the node is ours already
    someone_elses = {**drained, "n1": NodeState("n1", "drained", "steplens inc-9 SLOW_HOST drain")}
    assert check(DECISION, "p", someone_elses, (), ENABLED).verdict == "refused"
