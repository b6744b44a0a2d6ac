"""Engine state survives a snapshot/restore mid-run: same outputs as an uninterrupted run."""

from __future__ import annotations

import numpy as np

from infra.settings import DetectionConfig
from producers.simulator.catalogue import gc_pauses, straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import encode
from streams.detect.combine import chunks as codec
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


def test_snapshots_are_zstd_and_the_zlib_ones_of_sls6_still_restore() -> None:
    """SLS7 = SLS6's pickle compressed with zstd (8x cheaper than zlib for the same size): a worker that
    upgrades restores every job from the SLS6 snapshots already on the state topic."""
    import pickle
    import zlib

    import zstandard

    from streams.detect.engine import JobEngine
    from streams.detect.state.outbox import Outbox
    from streams.detect.state.store import decode_snapshot, encode

    engine = JobEngine.create("z", DetectionConfig())
    raw = encode(engine)
    assert raw[:4] == b"SLS8"
    state = pickle.loads(zstandard.ZstdDecompressor().decompress(raw[4:]))
    assert type(state[0]) is JobEngine and type(state[1]) is Outbox
    old = b"SLS6" + zlib.compress(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), 1)
    sls7 = b"SLS7" + raw[4:]
    for snapshot in (raw, old, sls7):
        snap = decode_snapshot(snapshot)
        assert snap is not None and snap[0].job == "z" and snap[1].job == "z"
    assert decode_snapshot(b"SLS5" + zlib.compress(pickle.dumps(state))) is None


def test_an_sls7_snapshot_s_row_shaped_summaries_restore_as_columns() -> None:
    """SLS7 frames held each rank's summary as (rank, aggregates, other_ns) and the job had no name table:
    restored, the open frames carry the same summaries as KernelRows and detection goes on."""
    import pickle

    import zstandard

    from streams.detect.engine import JobEngine
    from streams.detect.state.outbox import Outbox
    from streams.detect.state.store import decode_snapshot
    from streams.detect.windows.comm_columns import comm_columns
    from streams.detect.windows.step_frames import Frame

    engine = JobEngine.create("z", DetectionConfig())
    engine.frames.topo.grow(4)
    frame = engine.frames.frames[3] = Frame.empty(3, 4, T0)
    frame.kernels = [(r, [["allreduce/dp", "comm", 4, 1000 + r, None, 64, "dp", None, None, None, 300],  # type: ignore[list-item]
                          ["mm", "compute", 2, 50, 1e9]], 7) for r in range(4)]
    del engine.frames.names  # SLS7's StepFrames had no name table
    raw = b"SLS7" + zstandard.ZstdCompressor().compress(pickle.dumps((engine, Outbox("z"))))
    snap = decode_snapshot(raw)
    assert snap is not None
    restored = snap[0].frames.frames[3]
    rows = restored.kernel_rows()
    assert rows is not None and rows.rank.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert comm_columns(restored)["allreduce/dp"].total_ns.tolist() == [1000.0, 1001.0, 1002.0, 1003.0]
    assert set(snap[0].frames.names.names) == {"allreduce/dp", "comm", "dp", "mm", "compute"}


def test_every_frozen_slotted_dataclass_in_a_snapshot_pickles_by_name() -> None:
    """`dataclass(frozen=True, slots=True)` pickles its values as a list in field order: a field added to
    such a class later would shift a restored snapshot's values onto their neighbours' names (it happened
    to DetectionConfig). Every such class an engine snapshot holds must define its own by-name state."""
    import dataclasses
    import io
    import pickle

    fleet = FleetEngine(DetectionConfig())
    _run(fleet, _chunks(_restart_job())[:40], 0)
    found: dict[str, str] = {}

    class Finder(pickle.Pickler):
        def reducer_override(self, obj: object) -> object:
            t = type(obj)
            if dataclasses.is_dataclass(t) and t.__dataclass_params__.frozen and "__slots__" in t.__dict__:  # type: ignore[attr-defined]
                found[f"{t.__module__}.{t.__qualname__}"] = t.__getstate__.__name__
            return NotImplemented

    Finder(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(fleet.jobs["restart"])
    assert "infra.settings.DetectionConfig" in found  # the walk sees the classes it should
    assert {name: how for name, how in found.items() if how == "_dataclass_getstate"} == {}
