"""Engine state survives a snapshot/restore mid-run: same outputs as an uninterrupted run."""

from __future__ import annotations

import numpy as np

from producers.simulator.catalogue import gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch
from streams.detect.state.store import decode
from streams.detect.state.store import encode as encode_state
from tests.streams.helpers import T0, kernel_chunk, step_ms


def _chunks(job: FleetJob) -> list[dict[str, object]]:
    start, end = job.job_events()
    return chunks_of([[encode(start)]] + [[encode(e) for e in events] for events in job.iter_steps()]
                     + [[encode(end)]])


def chunks_of(batches: list[list[bytes]]) -> list[dict[str, object]]:
    """Each batch of wire events decoded to the engine's chunks, as the detect worker hands them on."""
    out: list[dict[str, object]] = []
    for raws in batches:
        chunks, _ = decode_batch(raws, 1 << 20)
        out.extend(codec.loads(codec.dumps(c)) for c in chunks)
    return out


def _run(fleet: FleetEngine, chunks: list[dict[str, object]], t: int) -> list[object]:
    out: list[object] = []
    for i, chunk in enumerate(chunks):
        now = T0 + (t + i) * 10**9
        out.extend(fleet.on_chunk(chunk, now))
        out.extend(fleet.tick(now))
    return out


def _restart_job() -> FleetJob:
    topo = Topology(dp=4, tp=2, pp=2)
    return FleetJob("restart", topo, steps=50, seed=8,
                    faults=[straggler(topo, 3, 1.3, start=10), *gc_pauses(topo, (30,), 0.66 * step_ms(topo))])


CUT = 22  # inside the open slow-rank incident of `_restart_job`, before the GC step


def test_restore_mid_run_gives_the_same_incidents_as_an_uninterrupted_run() -> None:
    chunks = _chunks(_restart_job())
    whole = _run(FleetEngine(DetectionConfig()), chunks, 0)
    cut = CUT
    first = FleetEngine(DetectionConfig())
    before = _run(first, chunks[:cut], 0)
    restored = FleetEngine(DetectionConfig())
    for name, engine in first.jobs.items():
        copy = decode(encode_state(engine))
        assert copy is not None
        restored.jobs[name] = copy
    after = _run(restored, chunks[cut:], cut)
    assert before + after == whole
    opened = [o.incident_id for o in whole if getattr(o, "state", None) == "open"]
    assert len(opened) == len(set(opened)) >= 2
    assert any(i.startswith("SLOW_RANK:restart:rank:3:") for i in opened)


def test_unreadable_snapshot_is_ignored() -> None:
    assert decode(b"garbage") is None
    assert decode(b"SLS1" + b"not zlib") is None


def test_large_chunks_split_in_order_under_the_limit() -> None:
    chunk = kernel_chunk([[r, 0, [[f"k{r % 3}", "compute", 1, 10 + i, None, None, None, None, None, None]
                                  for i in range(1 + r % 20)], 0] for r in range(500)])
    parts = [codec.loads(p) for p in codec.dumps_split(chunk, limit=20_000)]
    assert len(parts) > 1 and all(len(codec.dumps(p)) <= 20_000 for p in parts)
    whole = codec.loads(codec.dumps(chunk))
    columns = 0
    for name, values in whole.items():  # each part's summaries with their own aggregates, in order
        if isinstance(values, list | codec.Coded):  # names: a kernel chunk's travel dictionary-encoded
            columns += 1
            assert [v for p in parts for v in p[name]] == values, name  # type: ignore[literal-required]
        elif isinstance(values, np.ndarray):  # a numeric column of the binary frame (NaN where None was)
            columns += 1
            joined = np.concatenate([p[name] for p in parts])  # type: ignore[literal-required]
            np.testing.assert_array_equal(joined, values, err_msg=name)
    assert columns == len(chunk) - 4  # all but kind, job, attempt, world
    for p in parts:
        assert sum(p["entries"]) == len(p["key"])
    steps = {"kind": "steps", "job": "j", "world": 4, "rank": list(range(4)), "step": [0] * 4}
    assert [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in codec.loads(p).items()}
            for p in codec.dumps_split(steps)] == [steps]


def test_a_batch_delivers_its_steps_before_the_job_end_it_carries() -> None:
    """Topics interleave freely in one batch: an `end` read before the last steps must not finish the job first."""
    job = FleetJob("order-job", Topology(dp=4, tp=2, pp=1), steps=12, seed=2)
    start, end = job.job_events()
    steps = [encode(e) for batch in job.iter_steps() for e in batch]
    chunks, _ = decode_batch([encode(start), encode(end), *steps], 1 << 20)
    kinds = [(c["kind"], c.get("phase")) for c in chunks]
    assert kinds[0] == ("job", "start") and kinds[-1] == ("job", "end")
    fleet = FleetEngine(DetectionConfig())
    for chunk in chunks:
        fleet.on_chunk(codec.loads(codec.dumps(chunk)), T0)
    assert fleet.jobs["order-job"].stats.late == 0
