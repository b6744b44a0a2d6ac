"""A catch-up backlog read one input partition ahead of the other keeps one incident per fault.

After a restart or an outage the decode stage drains one partition's backlog before the
other's, so frames are released incomplete (capacity) and the culprit rank is missing from
hundreds of steps. Those steps are no evidence: the open incident must stay open, not
resolve and reopen under a new id. Judged against the simulator's ground truth.
"""

from __future__ import annotations

from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import Incident, StepEvent, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine, Output
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import T0


def test_a_partition_skewed_backlog_keeps_one_incident_per_fault() -> None:
    topo = Topology(dp=4, tp=2, pp=1)
    job = FleetJob("backlog", topo, 800, [straggler(topo, 5, 1.4)], seed=11)
    truth = job.ground_truth()
    fleet = FleetEngine(DetectionConfig())
    steps = list(job.iter_steps())
    start, end = job.job_events()
    out: list[Output] = []
    now = T0

    def feed(events: list[object], lagging: bool) -> None:
        chunks, _ = decode_batch([encode(e) for e in events], 1 << 20)  # type: ignore[arg-type]
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = (30 * 10**9, 5000) if lagging else (0, 0)
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))

    feed([start], False)
    for events in steps[:100]:  # live, paced
        feed(list(events), False)
        now += 50_000_000
        out.extend(fleet.tick(now))
    backlog: list[StepEvent] = [e for events in steps[100:700] for e in events]
    for partition in ({0, 2, 4, 6}, {1, 3, 5, 7}):  # one partition's backlog, then the other's
        part = [e for e in backlog if e.rank in partition]
        for i in range(0, len(part), 2000):
            feed(part[i:i + 2000], True)  # type: ignore[arg-type]
            now += 10_000_000
            out.extend(fleet.tick(now))
    for events in steps[700:]:  # live again
        feed(list(events), False)
        now += 50_000_000
        out.extend(fleet.tick(now))
    feed([end], False)
    for _ in range(100):
        now += 500_000_000
        out.extend(fleet.tick(now))

    assert fleet.jobs["backlog"].frames.stats.incomplete > 0, "the backlog released incomplete frames"
    alerts = [o for o in out if isinstance(o, Incident)]
    rank_ids = {a.incident_id for a in alerts if a.rule == "SLOW_RANK"}
    assert {r for a in alerts if a.rule == "SLOW_RANK" for r in a.ranks} == truth.slow_ranks()
    assert len(rank_ids) == len(truth.slow_ranks()), f"one incident per faulty rank: {sorted(rank_ids)}"
    opens = [a.incident_id for a in alerts if a.state == "open"]
    assert len(opens) == len(set(opens))
    latest = {a.incident_id: a.state for a in alerts}
    assert set(latest.values()) == {"resolved"}
