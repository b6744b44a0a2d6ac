"""Job attempts (contract 1.4, issue #21 item 4): a crash is one incident, a relaunch under the
same id is analysed afresh, an elastic relaunch with fewer hosts raises no hang (pure, no Kafka)."""

from __future__ import annotations

from producers.simulator.catalogue import straggler
from producers.simulator.fleet import DEFAULT_START_NS, FleetJob
from producers.simulator.topology import Topology
from schemas import Incident
from tests.streams.helpers import incidents, run_launches

ONSET = 170  # the second attempt's rank turns slow at this step


def _by_id(outputs: list[object]) -> dict[str, Incident]:
    return {i.incident_id: i for i in incidents(outputs)}  # each incident's last event


def test_a_crashed_job_is_one_incident_that_resolves_when_it_is_relaunched() -> None:
    first = FleetJob("crashy", Topology(dp=8, tp=4, pp=2), steps=200, seed=1)  # killed after step 199
    second = FleetJob("crashy", Topology(dp=8, tp=4, pp=2), steps=260, seed=2, attempt=1, first_step=150,
                          start_ns=first.end_ns() + 90 * 10**9,
                      faults=[straggler(Topology(dp=8, tp=4, pp=2), 5, 1.3, start=ONSET, attempt=1)])
    out = run_launches([(first, False), (second, True)])
    opened = incidents(out, "open")
    stopped = [i for i in opened if i.rule == "JOB_STOPPED"]
    assert len(stopped) == 1 and stopped[0].scope == "job" and stopped[0].step_first == 200, \
        [(i.rule, i.summary) for i in opened]
    assert "job stopped reporting at step 200" in stopped[0].summary
    assert not [i for i in opened if i.rule.startswith("HUNG")]
    final = _by_id(out)
    assert final[stopped[0].incident_id].state == "resolved"
    assert final[stopped[0].incident_id].evidence.get("attempt_ended") == 0.0
    # the relaunch re-runs steps 150-199: analysed, not dropped as late; its slow rank is found at once
    slow = [i for i in opened if i.rule == "SLOW_RANK"]
    assert [i.ranks for i in slow] == [[5]], [(i.rule, i.ranks, i.step_first) for i in opened]
    assert slow[0].incident_id.endswith(":a1")
    assert ONSET <= (slow[0].step_last or 0) <= ONSET + 5, (slow[0].step_first, slow[0].step_last)
    assert all(i.state == "resolved" for i in final.values())


def test_an_elastic_relaunch_with_fewer_hosts_raises_no_hang() -> None:
    """One host evicted: the job crashes at 64 ranks (8 hosts) and comes back at 56 (7 hosts)
    from an earlier checkpoint; the evicted host's ranks 56-63 are no hang."""
    first = FleetJob("elastic", Topology(dp=8, tp=4, pp=2), steps=100, seed=3)
    second = FleetJob("elastic", Topology(dp=7, tp=4, pp=2), steps=200, seed=4, attempt=1, first_step=80,
                          start_ns=first.end_ns() + 90 * 10**9)
    out = run_launches([(first, False), (second, True)], gap_s=30.0)
    opened = incidents(out, "open")
    assert not [i for i in opened if i.rule.startswith("HUNG")], [(i.rule, i.summary) for i in opened][:5]
    assert all(i.state == "resolved" for i in _by_id(out).values())


def test_a_late_report_of_an_earlier_attempt_is_counted_late_not_applied() -> None:
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch

    first = FleetJob("late", Topology(dp=4, tp=2, pp=1), steps=20, seed=5)
    second = FleetJob("late", Topology(dp=4, tp=2, pp=1), steps=20, seed=6, attempt=1, first_step=10,
                          start_ns=DEFAULT_START_NS + 60 * 10**9)
    fleet = FleetEngine(DetectionConfig())
    old_steps = list(first.iter_steps())
    raws = [encode(second.job_events()[0])] + [encode(e) for e in old_steps[-1]]
    chunks, _ = decode_batch(raws, 1 << 20)
    # the relaunch's start is read first (another partition), the old attempt's last step after it
    for chunk in sorted(chunks, key=lambda c: c["kind"] != "job"):
        fleet.on_chunk(codec.loads(codec.dumps(chunk)), 1)
    engine = fleet.jobs["late"]
    assert engine.attempt == 1 and engine.stats.late == 1 and engine.frames.next_step is None


def test_a_decode_backlog_is_not_a_crash() -> None:
    """A job's reports stop reaching the engine while the decode stage says it is behind its
    input (other jobs' chunks keep coming, late): the job's reports are queued, not stopped."""
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch
    from tests.streams.helpers import T0

    quiet = FleetJob("queued", Topology(dp=4, tp=2, pp=1), steps=20, seed=7)
    busy = FleetJob("other", Topology(dp=4, tp=2, pp=1), steps=400, seed=8)
    fleet = FleetEngine(DetectionConfig())
    out: list[object] = []
    now = T0
    quiet_steps = list(quiet.iter_steps())
    for i, events in enumerate(busy.iter_steps()):
        raws = [encode(e) for e in events] + ([encode(e) for e in quiet_steps[i]] if i < len(quiet_steps) else [])
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 30 * 10**9 if i >= 20 else 0, 0  # a backlog from step 20 on
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        now += 250_000_000
        out.extend(fleet.tick(now))
    assert now - fleet.jobs["queued"].heard_ns > 90 * 10**9  # silent 95 s, but behind a backlog
    assert [i.rule for i in incidents(out)] == []


def test_a_detect_worker_down_longer_than_job_silence_s_is_not_a_crash() -> None:
    """A job's state restored from a snapshot by a worker that starts minutes later: the silence
    was the worker's, the job's reports are queued; only a silence seen by this worker counts."""
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch
    from tests.streams.helpers import T0

    job = FleetJob("restored", Topology(dp=4, tp=2, pp=1), steps=20, seed=9)
    cfg = DetectionConfig()
    before = FleetEngine(cfg)
    now = T0
    for events in job.iter_steps():
        chunks, _ = decode_batch([encode(e) for e in events], 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 0, 0
            before.on_chunk(codec.loads(codec.dumps(chunk)), now)
        now += 500_000_000
        before.tick(now)
    after = FleetEngine(cfg, jobs=dict(before.jobs))  # the snapshot, restored 5 minutes later
    now += 300 * 10**9
    out: list[object] = []
    for _ in range(100):  # 50 s: less than job_silence_s since the worker started
        now += 500_000_000
        out.extend(after.tick(now))
    assert incidents(out) == []
    for _ in range(40):  # and then silent past job_silence_s by this worker's clock: the job stopped
        now += 500_000_000
        out.extend(after.tick(now))
    assert [i.rule for i in incidents(out, "open")] == ["JOB_STOPPED"]


def _crash_then_relaunch(gap_s: float) -> list[object]:
    """A crash at step 60, relaunched from step 40 `gap_s` later on the job's clock, all read from a
    backlog: the relaunch's reports reach the engine right after the crashed attempt's last ones."""
    topo = Topology(dp=4, tp=2, pp=2)
    first = FleetJob("backlogged", topo, steps=60, seed=5)
    second = FleetJob("backlogged", topo, steps=100, seed=6, attempt=1, first_step=40,
                          start_ns=first.end_ns() + int(gap_s * 1e9))
    return run_launches([(first, False), (second, True)], gap_s=0.0, backlog=True)


def test_a_crash_read_from_a_backlog_is_judged_on_the_job_clock_at_the_relaunch() -> None:
    opened = incidents(_crash_then_relaunch(90.0), "open")
    stopped = [i for i in opened if i.rule == "JOB_STOPPED"]
    assert len(stopped) == 1 and stopped[0].attempt == 0 and stopped[0].step_first == 60, \
        [(i.rule, i.summary) for i in opened]
    assert stopped[0].evidence["silent_s"] >= 90.0 - 0.05  # hosts' clocks differ by ms (the clock_offset trait)
    assert not [i for i in opened if i.rule != "JOB_STOPPED"], [(i.rule, i.summary) for i in opened]


def test_a_quick_restart_read_from_a_backlog_is_no_crash() -> None:
    opened = incidents(_crash_then_relaunch(20.0), "open")
    assert not opened, [(i.rule, i.summary) for i in opened]


def test_a_chunk_of_a_finished_let_go_job_is_late_not_a_new_job() -> None:
    """Kernel summaries travel on their own topic, decoded by whichever decode member owns their
    partition: one can reach the engine after the job's `end` and last step, once the worker let the
    finished job's state go. It made a new job of that summary's ranks alone, whose frames timed out
    into HUNG_RANK for every other rank (a restart test: 6 incidents). It is late; a relaunch is not."""
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch
    from tests.streams.helpers import T0, kernel_chunk

    job = FleetJob("done", Topology(dp=4, tp=2, pp=1), steps=10, seed=11)
    fleet = FleetEngine(DetectionConfig())
    out: list[object] = []
    now = T0
    start, end = job.job_events()
    for raws in [[encode(start)], *[[encode(e) for e in events] for events in job.iter_steps()], [encode(end)]]:
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = 0, 0
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        now += 500_000_000
        out.extend(fleet.tick(now))
    assert fleet.jobs["done"].finished
    fleet.evict("done")  # what the detect worker does once the final snapshot is out

    trailing = kernel_chunk([[3, 9, [["allreduce", "comm", 1, 5_000_000, None, None, "dp"]], 1_000_000]], world=8,
                            job="done")
    out.extend(fleet.on_chunk(codec.loads(codec.dumps(trailing)), now))
    for _ in range(600):  # five minutes of ticks: nothing may time out into a hang
        now += 500_000_000
        out.extend(fleet.tick(now))
    assert "done" not in fleet.jobs and fleet.late_after_finish == 1
    assert [i.rule for i in incidents(out)] == []

    relaunch = FleetJob("done", Topology(dp=4, tp=2, pp=1), steps=3, seed=12, attempt=1, start_ns=now)
    chunks, _ = decode_batch([encode(relaunch.job_events()[0])], 1 << 20)
    fleet.on_chunk(codec.loads(codec.dumps(chunks[0])), now)
    assert fleet.jobs["done"].attempt == 1 and "done" not in fleet.finished
