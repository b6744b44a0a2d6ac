"""A split group whose hot members are a slow host's ranks is that host's symptom (pure).

With data-dependent work some replicas run below the stage's median every step, so a DP group
holding a slow host's ranks looks "split" (its hot members the host's, its cold ones whichever
replicas had fewer tokens): one incident for the host, not one more per group."""

from __future__ import annotations

from streams.detect.incidents.join import OpenTrack, join
from streams.detect.scopes.finding import Finding

HOST = list(range(8, 16))


def _split(hot: list[int]) -> Finding:
    return Finding(rule="SLOW_GROUP", key="group:dp/1", scope="group", step=40, summary="DP group 1 split",
                   domain="dp", group=1, ranks=[1, 9, 17, 25], hot_ranks=hot, observed=1.3, open_after=2)


def _host_track() -> OpenTrack:
    return OpenTrack(key="host:node-1", scope="host", cause_phase="forward_ms", first=30, ranks=tuple(HOST),
                     rules=("SLOW_HOST",))


def test_a_split_whose_hot_ranks_are_an_open_slow_hosts_joins_it() -> None:
    out = join([_split([9])], 64, [_host_track()], 40)
    assert [(f.key, f.scope, f.rule) for f in out] == [("host:node-1", "host", "SLOW_GROUP")]


def test_a_split_whose_hot_ranks_a_host_flagged_now_holds_joins_it() -> None:
    host = Finding(rule="SLOW_HOST", key="host:node-1", scope="host", step=40, summary="host node-1", ranks=HOST,
                   host="node-1")
    out = join([_split([9]), host], 64, [], 40)
    assert {(f.key, f.rule) for f in out} == {("host:node-1", "SLOW_HOST"), ("host:node-1", "SLOW_GROUP")}
    assert out[0].rule == "SLOW_HOST" or out[0].key == "host:node-1"


def test_a_split_with_a_hot_rank_outside_the_culprit_stays_the_groups() -> None:
    out = join([_split([9, 25])], 64, [_host_track()], 40)
    assert [(f.key, f.scope) for f in out] == [("group:dp/1", "group")]


def test_a_joined_split_claims_no_member_findings() -> None:
    """Once a split is the host's symptom, its group no longer claims its members' findings."""
    rank = Finding(rule="R4", key="rank:9", scope="rank", step=40, summary="rank 9 compute", ranks=[9])
    out = join([_split([9]), rank], 64, [_host_track()], 40)
    assert {(f.rule, f.scope) for f in out} == {("SLOW_GROUP", "host"), ("R4", "rank")}


def test_a_culprit_incident_carrying_slow_group_claims_no_member_findings() -> None:
    track = OpenTrack(key="host:node-1", scope="host", cause_phase="forward_ms", first=30, ranks=tuple(HOST),
                      rules=("SLOW_HOST", "SLOW_GROUP"))
    rank = Finding(rule="R4", key="rank:9", scope="rank", step=41, summary="rank 9 compute", ranks=[9])
    out = join([rank], 64, [track], 41)
    assert [f.scope for f in out] == ["rank"]


def test_a_split_whose_hot_ranks_are_mostly_the_culprits_joins_it() -> None:
    """Two of the slow host's ranks and one noisy replica hot in one DP group: the host's symptom."""
    out = join([_split([9, 10, 25])], 64, [_host_track()], 40)
    assert [(f.key, f.scope) for f in out] == [("host:node-1", "host")]
