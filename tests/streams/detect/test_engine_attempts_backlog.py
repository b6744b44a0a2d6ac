"""A relaunch read from a backlog (pure): the relaunch's `start`, on the jobs topic, overtakes the
crashed attempt's last steps and device samples still queued on their own topics. The crashed
attempt must still be judged on all of its reports: the crash at the step it happened (not where
the reading had got to), a hang before the crash, nothing dropped as late.

Through Kafka, `make bench-detection` showed both: relaunch_slow_rank's JOB_STOPPED named step 31
(the crash was at 60) and elastic_relaunch's dead host raised no HUNG_HOST."""

from __future__ import annotations

import orjson

from producers.simulator.attempts import plan_attempts
from producers.simulator.catalogue import SCENARIOS, build_faults
from producers.simulator.stream import SimRun, SimulatedClock, stream_runs
from schemas import Incident, Topics
from tests.streams.helpers import feed_engine

STEPS, CUT = 120, 31  # the reading had got to step CUT of the crashed attempt when the relaunch came


def _overtaken(name: str, seed: int = 0) -> tuple[SimRun, list[Incident]]:
    sc = SCENARIOS[name]
    topo = sc.topology(64)
    run = SimRun.of_attempts(plan_attempts(name, topo, STEPS, build_faults(sc, topo, STEPS, seed), seed))
    sent: list[tuple[str, bytes]] = []
    clock = SimulatedClock()
    topics = Topics("")
    stream_runs([run], topics, lambda t, k, v: sent.append((t, v)), clock=clock.now, idle=clock.advance)
    relaunch_ns = min(orjson.loads(v)["ts_ns"] for t, v in sent if t == topics.jobs
                      and orjson.loads(v).get("attempt", 0) == 1)
    cut_ns = 0
    head: list[bytes] = []
    tail: list[bytes] = []
    rest: list[bytes] = []
    for t, v in sent:
        doc = orjson.loads(v)
        first = doc[0] if isinstance(doc, list) else doc
        if first.get("type") in ("step", "kernel_summary") and first.get("attempt", 0) == 0:
            if first["step"] == CUT - 1 and first.get("type") == "step":
                cut_ns = max(cut_ns, first["end_ns"])
            (tail if first["step"] >= CUT else head).append(v)
        elif first.get("type") == "device" and first["ts_ns"] < relaunch_ns:
            (head if cut_ns == 0 or first["ts_ns"] <= cut_ns else tail).append(v)
        elif t == topics.jobs and first.get("attempt", 0) == 0:
            head.append(v)
        else:
            rest.append(v)
    out = feed_engine([head, rest, tail], batch=256, behind=(30_000_000_000, 50_000),  # all of it from a backlog
                      drain_ticks=200)  # the backlog drained: the worker ticks on
    latest: dict[str, Incident] = {}
    for o in out:
        if isinstance(o, Incident):
            latest[o.incident_id] = o
    return run, list(latest.values())


def test_a_crash_overtaken_by_its_relaunch_is_dated_where_it_happened() -> None:
    run, found = _overtaken("relaunch_slow_rank")
    crash = run.faults[0].start
    stopped = [i for i in found if i.rule == "JOB_STOPPED"]
    assert [(i.attempt, i.step_first) for i in stopped] == [(0, crash)], [(i.rule, i.summary) for i in found]
    slow = [i for i in found if i.rule == "SLOW_RANK"]
    assert [(i.attempt, i.ranks) for i in slow] == [(1, list(run.faults[1].ranks))]
    assert all(i.state == "resolved" for i in found)


def test_a_hang_overtaken_by_its_elastic_relaunch_names_the_dead_host() -> None:
    """The relaunch's device samples, read before its `start`, went to the old attempt (they carry no
    attempt, and their ranks are the relaunch's: judged on them, node-7, the host the relaunch does not
    have, looked silent instead of the dead one). The old attempt keeps the samples past its last step
    apart, so at the relaunch its stall is judged on its own samples, those taken before the relaunch's
    start: the dead host, once (`make bench-detection` on a slow box: elastic_relaunch 0 of 3, no
    incident at all, when the stall was not judged). Live, with the input current, the hang is found
    before the relaunch arrives."""
    for seed in (0, 1, 2):
        run, found = _overtaken("elastic_relaunch", seed)
        dead = run.faults[0]
        hung = [(i.rule, i.attempt, i.host) for i in found if i.rule.startswith("HUNG")]
        assert hung == [("HUNG_HOST", 0, dead.hosts[0])], [(i.rule, i.attempt, i.summary) for i in found]
        assert not [i for i in found if i.rule == "JOB_STOPPED"]  # relaunched within job_silence_s
