"""One incident per fault: how findings are re-keyed before the book (streams/detect/incidents/join.py)."""

from __future__ import annotations

from streams.detect.incidents.book import IncidentBook
from streams.detect.incidents.join import GC_STORM_MEMORY, JoinState, OpenTrack, join
from streams.detect.scopes.finding import Finding


def _slow_step(step: int, cause: str | None = "backward_ms") -> Finding:
    return Finding(rule="SLOW_STEP", key="job", scope="job", step=step, summary="slow", cause_phase=cause,
                   open_after=2, candidate_gap=1, resolve_after=5)


def _rank(rule: str, rank: int, step: int, **kw: object) -> Finding:
    return Finding(rule=rule, key=f"rank:{rank}", scope="rank", step=step, summary=rule, ranks=[rank],
                   host="node-0", open_after=3, resolve_after=5, **kw)  # type: ignore[arg-type]


def test_device_finding_is_its_ranks() -> None:
    f = Finding(rule="R1", key="device:node-0/3", scope="device", step=1, summary="hot", ranks=[3])
    assert [(x.key, x.scope) for x in join([f], 64, [], 1)] == [("rank:3", "rank")]


def test_slow_step_joins_a_culprit_that_began_with_it() -> None:
    found = join([_slow_step(30), _rank("SLOW_RANK", 7, 30)], 64, [], 30)
    assert {f.key for f in found} == {"rank:7"}
    assert found[0].rule == "SLOW_RANK", "the culprit's rule stays the primary one"


def test_a_rank_whose_lag_is_a_fraction_of_the_steps_growth_does_not_take_the_slow_step() -> None:
    """A GC pause of every rank (+800 ms) beside a rank flagged 100 ms behind its peers (at 1,024
    ranks noise flags a few ranks every step): the slow step stays the job's. A rank that accounts
    for the growth still takes it."""
    slow = _slow_step(30, "gc_ms")
    slow.observed, slow.expected = 1716.0, 928.0
    bystander = _rank("SLOW_RANK", 82, 30, observed=771.0, expected=657.0)
    found = join([slow, bystander], 1024, [], 30)
    assert {(f.rule, f.key) for f in found} == {("SLOW_STEP", "job"), ("SLOW_RANK", "rank:82")}
    slow = _slow_step(30)
    slow.observed, slow.expected = 1150.0, 928.0
    culprit = _rank("SLOW_RANK", 82, 30, observed=880.0, expected=657.0)
    assert {(f.rule, f.key) for f in join([slow, culprit], 1024, [], 30)} == {("SLOW_STEP", "rank:82"),
                                                                                ("SLOW_RANK", "rank:82")}


def test_slow_step_stays_apart_from_a_rank_slow_all_along() -> None:
    tracks = [OpenTrack("rank:7", "rank", None, first=3)]
    found = join([_slow_step(30), _rank("SLOW_RANK", 7, 30)], 64, tracks, 30)
    assert {f.key for f in found} == {"job", "rank:7"}


def test_gc_storm_folds_rank_findings_into_the_job() -> None:
    gc = [_rank("R1", r, 40, metric="T8") for r in range(16)]
    found = join([_slow_step(40, "gc_ms"), *gc], 64, [], 40)
    assert {f.key for f in found} == {"job"}
    later = join([_rank("R1", 1, 41, metric="T8"), _rank("R1", 2, 41, metric="T8")], 64,
                 [OpenTrack("job", "job", "gc_ms", first=40)], 41)
    assert {f.key for f in later} == {"job"}, "while the storm's incident is open"


def test_isolated_long_step_opens_nothing_but_two_in_three_do() -> None:
    book = IncidentBook(job="j")
    out = []
    for step in range(10, 20):  # eval step 12, then a fault flapping on at 15, 17
        out += book.observe(step, [_slow_step(step)] if step in (12, 15, 17) else [], 0)
    opened = [o for o in out if getattr(o, "state", None) == "open"]
    assert [(o.step_first, o.step_last) for o in opened] == [(15, 17)]  # type: ignore[attr-defined]


def _r5(rank: int, domain: str, group: int) -> Finding:
    return Finding(rule="R5", key=f"link:{domain}/{group}/{rank}", scope="link", step=30, summary="r5",
                   ranks=[rank], domain=domain, group=group, open_after=3)


def _members(domain: str, group: int) -> set[int]:
    return {group, group + 4}  # pp pairs (r, r+4)


def test_r5_on_a_slow_links_groups_joins_the_link() -> None:
    link = Finding(rule="SLOW_LINK", key="link:node-2/rdma", scope="link", step=30, summary="link",
                   ranks=[4, 5], link="node-2/rdma")
    found = join([link, _r5(0, "pp", 0), _r5(2, "pp", 2)], 8, [], 30, _members)
    assert [(f.rule, f.key) for f in found] == [("SLOW_LINK", "link:node-2/rdma"), ("R5", "link:node-2/rdma"),
                                                ("R5", "link:pp/2/2")], "group 2 = ranks 2, 6: not the link's"


def test_symptoms_join_open_culprits_never_candidates() -> None:
    candidate = [OpenTrack("rank:4", "rank", None, first=28, opened=False, ranks=(4,))]
    assert join([_r5(0, "pp", 0)], 8, candidate, 30, _members)[0].key == "link:pp/0/0"
    opened = [OpenTrack("rank:4", "rank", None, first=28, opened=True, ranks=(4,))]
    f = join([_r5(0, "pp", 0)], 8, opened, 30, _members)[0]
    assert (f.key, f.scope, f.ranks) == ("rank:4", "rank", [4])


def _device(rule: str, rank: int, host: str, device: int) -> Finding:
    return Finding(rule=rule, key=f"device:{host}/{device}", scope="device", step=5, summary="hot", ranks=[rank],
                   host=host, device=device, metric="T2")


def test_devices_of_one_host_are_the_hosts_and_of_the_whole_job_the_jobs() -> None:
    two = join([_device("R2", 8, "node-1", 0), _device("R2", 9, "node-1", 1)], 64, [], 5)
    assert {(f.key, f.scope) for f in two} == {("host:node-1", "host")}
    same_device_twice = join([_device("R2", 8, "node-1", 0), _device("R2", 8, "node-1", 0)], 64, [], 5)
    assert {f.key for f in same_device_twice} == {"rank:8"}, "two ticks of one device are not a host"
    many = join([_device("R1", r, f"node-{r // 8}", r % 8) for r in range(16)], 64, [], 5)
    assert {(f.key, f.scope) for f in many} == {("job", "job")}


def test_a_quarter_of_the_jobs_devices_all_on_one_host_are_the_hosts() -> None:
    # a 32-rank job of four 8-device hosts: the slow host's devices drift back to their power as it recovers,
    # a quarter of the job's devices, all on one host: its finding, not the job's (an incident beside the host's)
    host = join([_device("R2", 16 + d, "node-2", d) for d in range(8)], 32, [], 90)
    assert {(f.key, f.scope) for f in host} == {("host:node-2", "host")}
    spread = join([_device("R2", 8 * h + d, f"node-{h}", d) for h in (1, 2) for d in range(4)], 32, [], 90)
    assert {(f.key, f.scope) for f in spread} == {("job", "job")}


def test_a_joining_slow_step_keeps_the_culprits_persistence() -> None:
    book = IncidentBook(job="j")
    out = []
    for step in (30, 31):  # a two-step blip on one rank: SLOW_RANK needs 3 steps, joining must not make it 2
        out += book.observe(step, join([_slow_step(step), _rank("SLOW_RANK", 7, step)], 64, [], step), 0)
    assert [o for o in out if getattr(o, "state", None) == "open"] == []


def test_gc_on_two_ranks_within_the_window_is_a_storm_not_two_incidents() -> None:

    state = JoinState()
    first = join([_rank("R1", 4, 60, metric="T8", cause_phase="gc_ms")], 64, [], 60, state=state)
    assert [f.key for f in first] == ["rank:4"], "one rank pausing: its own (leak) incident"
    second = join([_rank("R1", 12, 62, metric="T8", cause_phase="gc_ms"),
                   _rank("SLOW_RANK", 12, 62, cause_phase="gc_ms")], 64, [], 62, state=state)
    assert {f.key for f in second} == {"job"}, "a second rank pausing within the window: the job's storm"
    later = join([_rank("R1", 30, 80, metric="T8", cause_phase="gc_ms")], 64, [], 80, state=state)
    assert [f.key for f in later] == ["job"], "a storm that paused lately: another rank's pause is still its"
    quiet = 80 + GC_STORM_MEMORY + 1
    alone = join([_rank("R1", 30, quiet, metric="T8", cause_phase="gc_ms")], 64, [], quiet, state=state)
    assert [f.key for f in alone] == ["rank:30"], "the storm's pauses left the window and its memory"


def test_slow_step_joins_a_slow_stage() -> None:
    stage = Finding(rule="SLOW_STAGE", key="stage:1", scope="stage", step=60, summary="stage", stage=1,
                    ranks=[32, 33], open_after=3)
    found = join([_slow_step(60), stage], 64, [], 60)
    assert {(f.key, f.scope) for f in found} == {("stage:1", "stage")}


def test_job_symptoms_join_the_culprit_that_explains_the_slow_steps() -> None:
    culprit = [OpenTrack("stage:1", "stage", None, first=60, ranks=(32, 33), rules=("SLOW_STAGE", "SLOW_STEP"))]
    r4 = Finding(rule="R4", key="job", scope="job", step=70, summary="kernel", open_after=3)
    found = join([r4], 64, culprit, 70)
    assert [(f.key, f.scope, f.ranks) for f in found] == [("stage:1", "stage", [32, 33])]
    unexplained = [OpenTrack("stage:1", "stage", None, first=60, ranks=(32, 33), rules=("SLOW_STAGE",))]
    r4 = Finding(rule="R4", key="job", scope="job", step=70, summary="kernel", open_after=3)
    assert join([r4], 64, unexplained, 70)[0].key == "job", "a culprit the slow steps never joined explains nothing"


def test_a_slow_group_found_after_the_slow_steps_takes_their_incident_over() -> None:
    from schemas import Incident

    book = IncidentBook(job="j")
    out: list[Incident] = []
    for step in range(60, 70):
        found = [_slow_step(step)]
        if step >= 62:  # the group's bandwidth rule needs a few steps more than the step time
            found.append(Finding(rule="R6", key="group:dp/2", scope="group", step=step, summary="slow group",
                                 ranks=[2, 6], domain="dp", group=2, open_after=3))
        tracks = [OpenTrack(t.finding.key, t.finding.scope, t.finding.cause_phase, t.first, t.opened,
                            tuple(t.finding.ranks), tuple(t.rules)) for t in book.tracks.values()]
        out += [o for o in book.observe(step, join(found, 64, tracks, step, baseline_len=50), 0)
                if isinstance(o, Incident)]
    assert len({o.incident_id for o in out}) == 1, [(o.incident_id, o.state) for o in out]
    last = out[-1]
    assert (last.scope, last.domain, last.group) == ("group", "dp", 2)
    assert {"SLOW_STEP", "R6"} <= set(last.rules) and last.step_first == 60


def test_a_hosts_finding_after_the_slow_steps_takes_their_incident_over() -> None:
    """Heavy preprocessing on one host of a 32-rank job: the job's steps are slow at once, the host's inter-step
    CPU rule (R10 on its 8 ranks) needs a few steps more; no slow rank or stage takes the slow steps. The host's
    incident, once it opens, continues the job's: one incident, the host's scope."""
    from schemas import Incident

    book = IncidentBook(job="j")
    out: list[Incident] = []
    for step in range(60, 70):
        found = [_slow_step(step)]
        if step >= 61:
            found.append(Finding(rule="R10", key="host:node-2", scope="host", step=step, summary="inter-step CPU",
                                 ranks=list(range(16, 24)), host="node-2", open_after=3))
        tracks = [OpenTrack(t.finding.key, t.finding.scope, t.finding.cause_phase, t.first, t.opened,
                            tuple(t.finding.ranks), tuple(t.rules)) for t in book.tracks.values()]
        out += [o for o in book.observe(step, join(found, 32, tracks, step, baseline_len=50), 0)
                if isinstance(o, Incident)]
    assert len({o.incident_id for o in out}) == 1, [(o.incident_id, o.state) for o in out]
    assert (out[-1].scope, out[-1].host) == ("host", "node-2") and {"SLOW_STEP", "R10"} <= set(out[-1].rules)


def test_a_later_slow_step_the_old_culprit_cannot_explain_stays_the_jobs() -> None:
    culprit = [OpenTrack("rank:3", "rank", "backward_ms", first=10, ranks=(3,), rules=("SLOW_RANK", "SLOW_STEP"))]
    r3 = Finding(rule="R3", key="job", scope="job", step=30, summary="throughput", open_after=3)
    found = join([_slow_step(30, "gc_ms"), r3], 64, culprit, 30, baseline_len=20)
    assert {f.key for f in found} == {"job"}, "rank 3 is in the baseline by now: a GC pause of all ranks is apart"


def test_a_slow_step_long_after_the_culprits_onset_joins_it_while_the_baseline_predates_it() -> None:
    """A straggler from step 60: slow steps never enter the baseline, so at step 86 the job's step is still slow
    against the baseline of steps 40-59, and the straggler flagged now explains it. It joins the straggler's
    incident (it opened as a second incident beside it on a 16-rank job). The same straggler in the baseline
    (its middle after the onset), or one that explains a fraction of the growth, keeps the slow step apart."""
    culprit = [OpenTrack("rank:7", "rank", "backward_ms", first=60, ranks=(7,), rules=("SLOW_RANK", "SLOW_STEP"))]

    def step86(mid: float, lag_ms: float) -> list[Finding]:
        slow = _slow_step(86)
        slow.observed, slow.expected, slow.evidence = 1470.0, 1207.0, {"baseline_mid_step": mid}
        rank = _rank("SLOW_RANK", 7, 86, observed=1151.0 + lag_ms, expected=1151.0)
        return join([slow, rank], 16, culprit, 86, baseline_len=20)

    assert {(f.rule, f.key) for f in step86(49.0, 260.0)} == {("SLOW_STEP", "rank:7"), ("SLOW_RANK", "rank:7")}
    assert ("SLOW_STEP", "job") in {(f.rule, f.key) for f in step86(75.0, 260.0)}, "the straggler is in it"
    assert ("SLOW_STEP", "job") in {(f.rule, f.key) for f in step86(49.0, 60.0)}, "60 ms of a 263 ms growth"


def test_a_late_slow_step_joins_an_open_host_incident_from_after_the_baselines_middle() -> None:
    """A slow host from step 60, found by its kernels' efficiency (R4, host scope): at step 86 no SLOW_HOST or
    SLOW_RANK is flagged, yet the job's step is slow against a baseline mostly from before the host's onset.
    It joins the open host incident (a second, job incident beside it on a 32-rank job); with the host's onset
    inside the baseline's older half it stays the job's."""
    host = [OpenTrack("host:node-1", "host", "backward_ms", first=60, ranks=tuple(range(8, 16)),
                      rules=("R4", "SLOW_STEP", "SLOW_HOST"))]

    def step86(mid: float) -> set[tuple[str, str]]:
        slow = _slow_step(86)
        slow.observed, slow.expected, slow.evidence = 1467.0, 1241.0, {"baseline_mid_step": mid}
        r4 = Finding(rule="R4", key="host:node-1", scope="host", step=86, summary="efficiency", host="node-1",
                     ranks=list(range(8, 16)), open_after=3)
        return {(f.rule, f.key) for f in join([slow, r4], 32, host, 86, baseline_len=40)}

    assert step86(55.0) == {("SLOW_STEP", "host:node-1"), ("R4", "host:node-1")}
    assert ("SLOW_STEP", "job") in step86(65.0), "the host's onset is in the baseline: a slow step of its own"


def test_r5_on_every_groups_links_without_a_common_host_is_the_jobs_and_never_opens_alone() -> None:
    """32 ranks TP4 PP2 DP4: DP group g has ranks g, g+4, g+8, g+12 (stage 0, hosts 0-1) or, from g = 4,
    stage 1's on hosts 2-3. R5 on the members of all eight groups in one step (a wrong DP topology's onset
    moved every group's transfer): no host is in every flagged group, so no one link explains them: the
    job's, never opening alone. R5 on the four groups through node-1 (a slow link there) stays link findings."""
    def r5(rank: int) -> Finding:
        f = _r5(rank, "dp", rank % 4 + 4 * (rank >= 16))
        f.host = f"node-{rank // 8}"
        return f

    everywhere = join([r5(r) for r in range(32) if r not in (16, 20, 24, 28)], 32, [], 30)
    assert {(f.key, f.scope) for f in everywhere} == {("job", "job")}
    assert all(f.open_after > 10**6 and not f.ranks for f in everywhere)
    through_node1 = join([r5(r) for r in range(16)], 32, [], 30)
    assert {f.scope for f in through_node1} == {"link"} and len({f.key for f in through_node1}) == 16


def test_devices_of_several_hosts_at_once_are_the_jobs() -> None:
    spread = join([_device("R2", 8 * h + 1, f"node-{h}", 1) for h in range(3)], 64, [], 5)
    assert {(f.key, f.scope) for f in spread} == {("job", "job")}, "one device on each of 3 hosts: a common cause"
    two = join([_device("R2", 1, "node-0", 1), _device("R2", 9, "node-1", 1)], 64, [], 5)
    assert {f.key for f in two} == {"rank:1", "rank:9"}


def _r6(domain: str, group: int, ranks: list[int], step: int) -> Finding:
    return Finding(rule="R6", key=f"group:{domain}/{group}", scope="group", step=step, summary="r6", ranks=ranks,
                   domain=domain, group=group, open_after=3, resolve_after=5)


def test_r5_candidates_at_the_onset_join_the_group_r6_flags_after() -> None:
    """A group slowing as a whole: R5 on its members first (their own history is healthy), then R6 once
    that history caught up. The group's incident carries R5; other groups' and open R5 tracks are untouched."""
    book = IncidentBook(job="j")
    members = [2, 6, 10, 14]
    for step in (60, 61):
        book.observe(step, [_r5(r, "dp", 2) for r in members] + [_r5(5, "dp", 1)], 0)
    tracks = [OpenTrack(t.finding.key, t.finding.scope, None, t.first, t.opened, tuple(t.finding.ranks),
                        tuple(t.rules)) for t in book.tracks.values()]
    assert len(tracks) == 5 and not any(t.opened for t in tracks)
    out = []
    for step in (62, 63, 64):
        found = join([_r6("dp", 2, members, step)], 64, tracks if step == 62 else [], step)
        assert {f.key for f in found} == {"group:dp/2"}
        out += book.observe(step, found, 0)
        tracks = []
    opened = [o for o in out if getattr(o, "state", None) == "open"]
    assert len(opened) == 1 and opened[0].rule == "R6"  # type: ignore[attr-defined]
    assert set(opened[0].rules) == {"R6", "R5"}  # type: ignore[attr-defined]
    # without R5 candidates on the group's links (another group's, or none), R6 stays alone
    lone = join([_r6("dp", 3, [3, 7], 62)], 64, [OpenTrack("link:dp/2/2", "link", None, 60, False, (2,), ("R5",))], 62)
    assert [f.rule for f in lone] == ["R6"]
    # an R5 incident already open is a problem of its own, not a candidate to take
    held = join([_r6("dp", 2, members, 62)], 64, [OpenTrack("link:dp/2/2", "link", None, 60, True, (2,), ("R5",))], 62)
    assert [f.rule for f in held] == ["R6"]


def test_another_groups_bandwidth_joining_a_split_group_is_no_headline() -> None:
    split = Finding(rule="SLOW_GROUP", key="group:dp/4", scope="group", step=70, summary="split", ranks=[32, 36],
                    domain="dp", group=4)
    tp = Finding(rule="R6", key="rank:32", scope="rank", step=70, summary="slow group TP 9", ranks=[32], domain="tp",
                 group=9, observed=78.6)
    own = Finding(rule="R5", key="link:dp/4/36", scope="link", step=70, summary="r5", ranks=[36], domain="dp", group=4,
                  observed=1.8)
    found = {f.summary: f for f in join([split, tp, own], 64, [], 70)}
    assert {f.key for f in found.values()} == {"group:dp/4"}
    assert found["slow group TP 9"].observed is None, "a TP group's figure is not the DP group's evidence"
    assert found["r5"].observed == 1.8


def test_a_member_finding_joins_the_open_split_group_before_a_group_only_flagged_now() -> None:
    """A cold expert's R1 (opens at once) inside an open EP-group incident must not lift a TP-group
    candidate flagged in the same step to a second incident (moe_imbalance)."""
    open_ep = OpenTrack("group:ep/4", "group", None, first=60, ranks=(9, 11, 13, 15), rules=("SLOW_GROUP", "R4"))
    tp_now = Finding(rule="SLOW_GROUP", key="group:tp/7", scope="group", step=72, summary="split", ranks=[14, 15],
                     domain="tp", group=7, open_after=3)
    r1 = Finding(rule="R1", key="device:node-1/7", scope="device", step=72, summary="T3 low", ranks=[15],
                 host="node-1", device=7, metric="T3", open_after=1)
    found = join([tp_now, r1], 64, [open_ep], 72)
    assert next(f for f in found if f.rule == "R1").key == "group:ep/4"
    assert next(f for f in found if f.rule == "SLOW_GROUP").key == "group:tp/7", "the candidate itself stays"


def test_r5_at_the_onset_joins_the_group_r6_flags_again_after_a_gap() -> None:
    """Heavy-tailed noise: R6 flags a slowed group, misses a few steps (its candidate drops, and so
    do the members' R5 candidates of the onset), then flags again and opens. The onset's R5 was
    this fault's: the group's finding carries R5 when R6 comes back within ONSET_R5_STEPS."""
    state = JoinState()
    members = [3, 7, 11]
    join([_r5(r, "dp", 3) for r in members] + [_r5(5, "dp", 1)], 64, [], 63, state=state)
    quiet = join([], 64, [], 64, state=state)
    assert quiet == []
    back = join([_r6("dp", 3, members, 67)], 64, [], 67, state=state)
    assert sorted(f.rule for f in back) == ["R5", "R6"] and {f.key for f in back} == {"group:dp/3"}
    # too long after the onset: R6 alone; another group's R5 never joins
    late = join([_r6("dp", 3, members, 80)], 64, [], 80, state=state)
    assert [f.rule for f in late] == ["R6"]
    other = join([_r6("dp", 2, [2, 6], 68)], 64, [], 68, state=JoinState(r5_last={"dp/1": 66}))
    assert [f.rule for f in other] == ["R6"]


def test_throughput_beside_a_culprit_flagged_now_joins_it_without_a_slow_step() -> None:
    """A slow host costing the job less than the slow-step scope's robust sigmas: R3 on step
    throughput is its toll on the job, part of its incident (unbalanced scheduling: R1, R3, R8)."""
    host = Finding(rule="SLOW_HOST", key="host:node-2", scope="host", step=61, summary="host", ranks=[16, 17],
                   host="node-2", open_after=3)
    r3 = Finding(rule="R3", key="job", scope="job", step=61, summary="throughput", metric="step_throughput",
                 open_after=3)
    out = join([host, r3], 64, [], 61, baseline_len=20)
    assert {(f.rule, f.key) for f in out} == {("SLOW_HOST", "host:node-2"), ("R3", "host:node-2")}
    # no culprit now: R3 stays the job's (the engine drops it when the step was not slow)
    alone = join([Finding(rule="R3", key="job", scope="job", step=61, summary="t", metric="step_throughput")],
                 64, [], 61, baseline_len=20)
    assert [f.key for f in alone] == ["job"]


def _split(step: int) -> list[Finding]:
    """An EP group split (ranks 32 and 34 busy while 36 and 38 idle) with its busy members folded in."""
    group = Finding(rule="SLOW_GROUP", key="group:ep/8", scope="group", step=step, summary="split",
                    ranks=[32, 34, 36, 38], domain="ep", group=8, observed=1.3, expected=1.0, hot_ranks=[32, 34],
                    open_after=3)
    member = _rank("SLOW_RANK", 32, step, observed=1059.0, expected=856.0)
    return join([group, member], 64, [], step)  # the member is the group's (`_join_split`)


def test_slow_steps_joining_a_split_group_flagged_a_step_before_are_one_incident() -> None:
    # moe_imbalance at 64 ranks: the split candidates at step 60, the job's slow steps from 61 open at 62 (two
    # steps) and the group at 62 (three): two incidents for one fault, before the slow steps joined the split
    from schemas import Incident

    book = IncidentBook(job="j")
    out: list[Incident] = []
    for step in range(60, 70):
        found = _split(step)
        if step >= 61:
            slow = _slow_step(step)
            slow.observed, slow.expected = 1231.0, 1036.0
            found.append(slow)
        tracks = [OpenTrack(t.finding.key, t.finding.scope, t.finding.cause_phase, t.first, t.opened,
                            tuple(t.finding.ranks), tuple(t.rules)) for t in book.tracks.values()]
        out += [o for o in book.observe(step, join(found, 64, tracks, step, baseline_len=50), 0)
                if isinstance(o, Incident)]
    assert len({o.incident_id for o in out}) == 1, [(o.incident_id, o.state) for o in out]
    assert out[-1].scope == "group" and {"SLOW_GROUP", "SLOW_STEP"} <= set(out[-1].rules)


def test_a_split_whose_busy_members_are_a_fraction_of_the_growth_does_not_take_the_slow_step() -> None:
    group, member = _split(60)
    slow = _slow_step(61)
    slow.observed, slow.expected = 1900.0, 1000.0  # +900 ms: a job-wide stall, the split's +203 ms is noise beside it
    tracks = [OpenTrack("group:ep/8", "group", None, first=60, opened=False, ranks=(32, 34, 36, 38))]
    group.step = member.step = 61
    found = join([group, member, slow], 64, tracks, 61, baseline_len=50)
    assert {(f.rule, f.key) for f in found} >= {("SLOW_STEP", "job"), ("SLOW_GROUP", "group:ep/8")}


def test_a_split_group_opening_after_a_device_incident_of_its_members_continues_it() -> None:
    # device samples run ahead of the steps in a backlog: the cold experts' idle devices (R1 on AI Core) open at
    # once, a step before the EP group's split is flagged (moe_imbalance through Kafka: two incidents)
    from schemas import Incident

    def group(step: int) -> Finding:
        return Finding(rule="SLOW_GROUP", key="group:ep/5", scope="group", step=step, summary="split",
                       ranks=[9, 11, 13, 15], domain="ep", group=5, hot_ranks=[9, 11], open_after=3)

    book = IncidentBook(job="j")
    idle = Finding(rule="R1", key="rank:13", scope="rank", step=61, summary="AI Core 18 %", ranks=[13],
                   host="node-1", metric="T3", open_after=1, resolve_after=5)
    out = [o for o in book.observe(61, [idle], 0) if isinstance(o, Incident)]
    for step in range(62, 66):
        out += [o for o in book.observe(step, [group(step)], 0) if isinstance(o, Incident)]
    assert len({o.incident_id for o in out}) == 1, [(o.incident_id, o.state) for o in out]
    assert out[-1].scope == "group" and {"SLOW_GROUP", "R1"} <= set(out[-1].rules)
    # a device incident of a rank outside the group stays its own
    other = IncidentBook(job="j")
    apart = Finding(rule="R1", key="rank:40", scope="rank", step=61, summary="hot", ranks=[40], host="node-5",
                    metric="T1", open_after=1, resolve_after=5)
    ids = {o.incident_id for o in other.observe(61, [apart], 0) if isinstance(o, Incident)}
    for step in range(62, 66):
        ids |= {o.incident_id for o in other.observe(step, [group(step)], 0) if isinstance(o, Incident)}
    assert len(ids) == 2


def test_devices_drifting_as_a_slow_stage_recovers_are_the_stages_not_the_jobs() -> None:
    # a 2-stage 32-rank job: every rank waits on a slow stage in each collective, so the devices of both stages
    # shift their power with its onset and again as it recovers; that drift, 3 steps after the stage's incident
    # was last open, opened a job R2 incident of its own (bench.detection.replay --ranks 32: 6 of 8 seeds)
    stage = OpenTrack("stage:0", "stage", "busy_ms", 60, ranks=tuple(range(16)), rules=("SLOW_STAGE", "SLOW_STEP"))
    state = JoinState()
    join([_slow_step(89)], 32, [stage], 89, state=state)
    drift = [_device("R2", 8 * h + d, f"node-{h}", d) for h in (0, 2) for d in range(4)]
    after = join(drift, 32, [], 93, state=state)
    assert {(f.key, f.scope) for f in after} == {("stage:0", "stage")}
    later = join([_device("R2", 8 * h + d, f"node-{h}", d) for h in (0, 2) for d in range(4)], 32, [], 93 + 11,
                 state=state)
    assert {(f.key, f.scope) for f in later} == {("job", "job")}, "past RECOVERY_STEPS the drift is the job's"
    # a stage that never slowed the job's steps sways its own devices only
    quiet = OpenTrack("stage:1", "stage", "busy_ms", 60, ranks=tuple(range(16, 32)), rules=("SLOW_STAGE",))
    other = join([_device("R2", 8 * h + d, f"node-{h}", d) for h in (0, 1) for d in range(4)], 32, [quiet], 70,
                 state=JoinState())
    assert {(f.key, f.scope) for f in other} == {("job", "job")}
    own = join([_device("R2", 8 * h + d, f"node-{h}", d) for h in (2, 3) for d in range(4)], 32, [quiet], 70,
               state=JoinState())
    assert {(f.key, f.scope) for f in own} == {("stage:1", "stage")}


def test_a_kernels_efficiency_dip_at_job_scope_beside_a_slow_stage_flagged_now_is_the_stages() -> None:
    # a slow stage of a 2-stage pipeline is half the job's ranks: its kernels move the job's median kernel
    # efficiency (R4 at job scope) in the stage's first step, before any slow step; it opened an incident of its
    # own beside the stage's (bench.detection.replay --ranks 32, slow_pp_stage seed 2)
    stage = Finding(rule="SLOW_STAGE", key="stage:0", scope="stage", step=60, summary="stage 0 slow",
                    ranks=list(range(16)), observed=1324.0, expected=1051.0)
    r4 = Finding(rule="R4", key="job", scope="job", step=60, summary="kernel below", metric="B2:4096x4096x2752")
    out = join([stage, r4], 32, [], 60)
    assert {(f.rule, f.key) for f in out} == {("SLOW_STAGE", "stage:0"), ("R4", "stage:0")}
    alone = join([Finding(rule="R4", key="job", scope="job", step=60, summary="kernel below", metric="B2")], 32,
                 [], 60)
    assert [(f.rule, f.key) for f in alone] == [("R4", "job")], "without a culprit it is the job's"


def test_a_flapping_links_next_episode_takes_the_slow_steps_it_comes_back_with() -> None:
    # a link flapping every 30 steps: its held incident comes back with the steps it slows; flagged in that step
    # only, it did not take them, and a 32-rank job opened a job SLOW_STEP incident beside the link's 4th episode
    def link() -> Finding:
        return Finding(rule="SLOW_LINK", key="link:node-2/rdma", scope="link", step=110, summary="link",
                       ranks=list(range(16, 24)), host="node-2", link="node-2/rdma")
    back = join([link(), _slow_step(110)], 32, [], 110, held=frozenset({"link:node-2/rdma"}))
    assert {(f.rule, f.key) for f in back} == {("SLOW_LINK", "link:node-2/rdma"), ("SLOW_STEP", "link:node-2/rdma")}
    first_time = join([link(), _slow_step(110)], 32, [], 110)
    assert ("SLOW_STEP", "job") in {(f.rule, f.key) for f in first_time}, "a link's first dip in one step: not yet"
