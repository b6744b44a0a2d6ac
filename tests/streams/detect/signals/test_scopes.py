"""Where rule findings land (streams/detect/signals/): host-wide rank alarms, slow steps' rules, slow groups."""

from __future__ import annotations

import numpy as np

from streams.detect.config import DetectionConfig
from streams.detect.rules.base import Alarms
from streams.detect.scopes.finding import Finding
from streams.detect.signals.frames import follow_slow_step, name_slow_groups
from streams.detect.signals.shared import FindingParams, rank_findings
from streams.detect.windows.step_frames import Frame
from tests.streams.helpers import hosts_topology

PARAMS = DetectionConfig().params(FindingParams)


def _frame(world: int = 16) -> Frame:
    f = Frame.__new__(Frame)
    f.step = 7
    f.seen = np.ones(world, dtype=bool)
    return f


def _alarms(ranks: list[int], world: int = 16) -> Alarms:
    mask = np.zeros(world, dtype=bool)
    mask[ranks] = True
    return Alarms.where(mask, np.full(world, 0.6), np.full(world, 0.1), np.full(world, 0.5))


def _run(ranks: list[int]) -> list[Finding]:
    return rank_findings("R10", _alarms(ranks), hosts_topology(), _frame(), PARAMS,
                         "inter-step CPU share", "x")


def test_half_a_host_alarming_is_one_host_finding() -> None:
    out = _run([8, 9, 10, 11])
    assert [(f.key, f.scope, f.ranks, f.host) for f in out] == [("host:node-1", "host", [8, 9, 10, 11], "node-1")]


def test_few_ranks_of_a_host_stay_rank_findings() -> None:
    out = _run([1, 9, 10])
    assert sorted(f.key for f in out) == ["rank:1", "rank:10", "rank:9"], "3 of 8 is below half a host"


def test_half_the_world_is_one_job_finding_and_none_is_nothing() -> None:
    assert [f.key for f in _run([*range(9)])] == ["job"]
    assert _run([]) == []


def test_gc_stays_per_rank() -> None:
    out = rank_findings("R1", _alarms([8, 9, 10, 11]), hosts_topology(), _frame(), PARAMS, "GC", "T8",
                        by_host=False)
    assert sorted(f.key for f in out) == ["rank:10", "rank:11", "rank:8", "rank:9"]


def _f(rule: str, key: str, scope: str = "job", **kw: object) -> Finding:
    return Finding(rule=rule, key=key, scope=scope, step=7, summary=rule, **kw)  # type: ignore[arg-type]


def test_job_rules_follow_a_slow_step_joined_to_its_culprit() -> None:
    slow = _f("SLOW_STEP", "host:node-1", "host", ranks=[8, 9], host="node-1", open_after=2)
    r3, gc = _f("R3", "job"), _f("R1", "job", metric="T8")
    follow_slow_step([slow, r3, gc])
    assert (r3.key, r3.scope, r3.host, r3.ranks, r3.open_after) == ("host:node-1", "host", "node-1", [8, 9], 2)
    assert gc.key == "job", "R1 (GC storm, device metrics) keeps its own join"


def test_job_rules_stay_when_the_slow_step_is_the_jobs() -> None:
    r3 = _f("R3", "job")
    follow_slow_step([_f("SLOW_STEP", "job"), r3])
    assert r3.key == "job"
    follow_slow_step([r3])
    assert r3.key == "job"


def test_slow_group_named_only_when_r6_stays_on_its_group() -> None:
    group = _f("R6", "group:dp/2", "group", domain="dp", group=2, ranks=[2, 6])
    symptom = _f("R6", "link:node-1/rdma", "link", domain="dp", group=3)
    out = name_slow_groups([group, symptom])
    named = [f for f in out if f.rule == "SLOW_GROUP"]
    assert [(f.key, f.scope, f.group, f.ranks) for f in named] == [("group:dp/2", "group", 2, [2, 6])]
    assert named[0].ranks is not group.ranks

