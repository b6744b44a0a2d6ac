"""`make demo`'s own job, replayed through the detection engine in process: every injected fault found.

`make demo` exits non-zero when it misses a fault of its job, but `make test` does not run it (it
starts its own services on the default ports). Its data stall was once a single slow batch,
which the slow step by design does not report (an isolated slow step is healthy training), and
the demo failed its own check unnoticed. This replays `build_job`'s events through the same
engine the detect worker runs, and scores what it finds exactly as the demo does, against the
job's ground truth.
"""

from __future__ import annotations

from schemas import Incident, encode
from steplens.config import DetectionConfig
from steplens.demo import build_job
from steplens.scoring import score, steps_in_ranges
from streams.combine import chunks as codec
from streams.engine import FleetEngine
from streams.ingest.decode import decode_batch

STEP_NS = 50_000_000


def _incidents(job_id: str) -> list[Incident]:
    """The latest state of every incident the engine raises for the demo's job."""
    sim = build_job(job_id, steps=120, seed=7)
    start, end = sim.job_events()
    batches = [[encode(start)], *([encode(e) for e in step] for step in sim.iter_steps()), [encode(end)]]
    fleet = FleetEngine(DetectionConfig())
    now = start.ts_ns
    out = []
    for raws in batches:
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        now += STEP_NS
        out.extend(fleet.tick(now))
    for _ in range(40):  # the windows' timeouts pass: the last frames are released, the job ends
        now += 10 * STEP_NS
        out.extend(fleet.tick(now))
    latest: dict[str, Incident] = {}
    for o in out:
        if isinstance(o, Incident) and o.job == job_id:
            latest[o.incident_id] = o
    return list(latest.values())


def test_the_demo_job_finds_its_straggler_its_gc_storm_and_its_data_stall() -> None:
    job_id = "demo-replay"
    truth = build_job(job_id, steps=120, seed=7).ground_truth()
    incidents = _incidents(job_id)
    found_ranks = {r for i in incidents if i.rule == "SLOW_RANK" for r in i.ranks}
    found_steps = steps_in_ranges([(i.step_first, i.step_last) for i in incidents
                                   if i.rule == "SLOW_STEP" and i.step_first is not None
                                   and i.step_last is not None])
    ranks, steps = score(truth.slow_ranks(), found_ranks), score(truth.slow_steps(), found_steps)
    summary = [(i.rule, i.ranks, i.step_first, i.step_last) for i in incidents]
    assert truth.slow_ranks() == {37} and truth.slow_steps() == {40, 41, 42, 77, 78, 79}
    assert ranks.recall == 1.0 and ranks.precision == 1.0, summary
    assert steps.recall == 1.0 and steps.precision == 1.0, summary
    assert all(i.state == "resolved" for i in incidents), "the job ended: every incident is resolved"
