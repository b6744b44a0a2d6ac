"""The columnar decode (step, kernel-summary and device records read by msgspec's typed decoder) gives exactly
the per-event path's chunks.

Same chunks in the same order with the same keys, values and types (an int stays an int, NaN stays
NaN and None None), and the same counts, on the simulator's batches (faults, relaunches, job events)
and on hand-built bad batches, where the columnar path must hand the batch back to the per-event
path, which counts each bad element alone.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from infra.settings import load_settings
from producers.simulator.attempts import plan_attempts
from producers.simulator.catalogue import SCENARIOS, build_faults, layout, scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from streams.columnar_backoff import ColumnarBackoff
from streams.detect.ingest import columns
from streams.detect.ingest import decode as decode_module
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import nan_spelled

MAX = 1 << 20


def _both(raws: list[Any]) -> tuple[bytes, bytes, bool]:
    """(per-event result, columnar result, whether the columnar path kept the batch) as comparable bytes."""
    old_chunks, old = decode_batch(raws, MAX, columnar=False)
    new_chunks, new = decode_batch(raws, MAX, columnar=True)
    kept = decode_module._decode_columnar(raws, MAX) is not None
    as_bytes = [orjson.dumps([nan_spelled(old_chunks), old.events, old.bad, sorted(old.by_type.items())]),
                orjson.dumps([nan_spelled(new_chunks), new.events, new.bad, sorted(new.by_type.items())])]
    return as_bytes[0], as_bytes[1], kept


def _stream(runs: list[SimRun]) -> list[bytes]:
    raws: list[bytes] = []
    stream_runs(runs, Topics(""), lambda topic, key, value: raws.append(value))
    return raws


def _batches(raws: list[bytes], size: int) -> list[list[bytes]]:
    return [raws[i:i + size] for i in range(0, len(raws), size)]


@pytest.mark.parametrize("scenario", ["healthy", "hung_rank", "dead_host", "slow_pp_stage", "unstable_power",
                                      "bad_batch_size", "moe_imbalance"])
def test_simulator_batches_decode_alike(scenario: str) -> None:
    raws = _stream([SimRun(scenario_job(scenario, ranks=64, steps=30, seed=3, job_id=f"j-{scenario}"))])
    kept = 0
    for batch in _batches(raws, 97):  # odd cuts: a job's records split across batches, job events inside
        old, new, fast = _both(batch)
        assert old == new
        kept += fast
    assert kept > 0  # the columnar path did take batches


def test_relaunches_and_interleaved_jobs_decode_alike() -> None:
    """Two attempts of one job in a batch (their chunks per attempt, in order) and two jobs interleaved."""
    topo = layout(64)
    runs = [SimRun.of_attempts(plan_attempts(name, topo, 40, build_faults(SCENARIOS[name], topo, 40, 1), 1))
            for name in ("job_crash", "elastic_relaunch")]
    runs.append(SimRun(scenario_job("healthy", ranks=64, steps=40, seed=2, job_id="other")))
    raws = _stream(runs)
    for size in (50, 400, 5000):
        for batch in _batches(raws, size):
            old, new, _ = _both(batch)
            assert old == new


def _step(rank: int = 0, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "step", "v": "1.4", "job": "j", "rank": rank, "world": 4, "host": "node-0",
                           "device": rank, "domains": {"dp": {"group": 0, "size": 4, "index": rank},
                                                       "pp": {"group": 0, "size": 1, "index": 0}},
                           "step": 7, "start_ns": 10**18, "end_ns": 10**18 + 5,
                           "phases": {"forward_ms": 1.5, "backward_ms": 3, "gc_ms": -1.0}, "samples": 8}
    doc.update(over)
    return doc


def _device(device: int = 0, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "device", "v": "1.1", "host": "node-0", "device": device, "ts_ns": 10**18,
                           "job": "j", "rank": device, "power_w": 300.0, "temp_c": 60}
    doc.update(over)
    return doc


def _summary(rank: int = 0, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "kernel_summary", "v": "1.4", "job": "j", "rank": rank, "world": 4, "host": "node-0",
                           "device": rank, "domains": {"dp": {"group": 0, "size": 4, "index": rank}}, "step": 7,
                           "other_ns": 5,
                           "entries": [{"key": "F2:8x8", "cat": "compute", "count": 4, "total_ns": 1000, "flops": 1e9,
                                        "launch_mean_us": 7.5, "launch_mad_us": 1.0},
                                       {"key": "allreduce/dp", "cat": "comm", "op": "allreduce", "domain": "dp",
                                        "count": 2, "total_ns": 500, "bytes": 4096, "max_ns": 300}]}
    doc.update(over)
    return doc


def _entry(**over: Any) -> dict[str, Any]:
    """A summary whose second aggregate is changed."""
    doc = _summary(1)
    doc["entries"][1].update(over)
    return doc


def _pack(*docs: dict[str, Any]) -> bytes:
    return orjson.dumps(list(docs))


GOOD = [_pack(_step(0), _step(1)), _pack(_device(0), _device(1)), _pack(_step(2), _step(3))]
GOOD_KERNELS = [_pack(_summary(0), _summary(1)), _pack(_step(0)), _pack(_summary(2), _summary(3))]

BAD_RECORDS: dict[str, bytes] = {
    "rank-outside-world": _pack(_step(0), _step(9)),
    "float-rank": _pack(_step(0), _step(1.0)),  # type: ignore[arg-type]
    "bool-rank": _pack(_step(True)),  # type: ignore[arg-type]
    "string-step": _pack(_step(0, step="7")),
    "huge-end": _pack(_step(0, end_ns=2**64 - 1)),
    "start-after-end": _pack(_step(0, start_ns=10**18 + 9)),
    "version-2": _pack(_step(0, v="2.0")),
    "version-unicode": _pack(_step(0, v="1.²")),
    "version-number": _pack(_step(0, v=1.0)),
    "empty-job": _pack(_step(0, job="")),
    "null-attempt": _pack(_step(0, attempt=None), _step(1)),
    "attempt-out-of-range": _pack(_step(0, attempt=70_000)),
    "attempt-1": _pack(_step(0, attempt=1), _step(1)),
    "null-host": _pack(_step(0, host=None)),
    "no-host": _pack({k: v for k, v in _step(0).items() if k != "host"}),
    "null-phases": _pack(_step(0, phases=None)),
    "list-phases": _pack(_step(0, phases=[])),
    "null-phase": _pack(_step(0, phases={"forward_ms": None})),
    "bool-phase": _pack(_step(0, phases={"forward_ms": True})),
    "null-domains": _pack(_step(0, domains=None)),
    "float-group": _pack(_step(0, domains={"dp": {"group": 1.0, "size": 4, "index": 0}})),
    "null-pp-index": _pack(_step(0, domains={"pp": {"group": 0, "size": 1, "index": None}})),
    "no-pp-index": _pack(_step(0, domains={"pp": {"group": 0, "size": 1}})),
    "no-pp": _pack(_step(0, domains={"dp": {"group": 0, "size": 4, "index": 0}})),
    "unknown-field": _pack(_step(0, extra=1)),
    "unknown-domain": _pack(_step(0, domains={"xx": {"group": 0, "size": 4, "index": 0}})),
    "mixed-types": _pack(_step(0), _device(0)),
    "kernel-in-steps": _pack(_step(0), {"type": "kernel_summary", "v": "1.1", "job": "j", "rank": 1, "world": 4,
                                        "host": "h", "device": 1, "step": 7, "entries": []}),
    "null-element": b'[' + orjson.dumps(_step(0)) + b',null]',
    "empty-array": b"[]",
    "not-json": orjson.dumps([_step(0)])[:-5],
    "nan": orjson.dumps([_step(0)]).replace(b'"samples":8', b'"samples":NaN'),
    "infinity-in-phase": orjson.dumps([_step(0)]).replace(b'"forward_ms":1.5', b'"forward_ms":Infinity'),
    "nan-flops": orjson.dumps([_step(0, flops=1.0)]).replace(b'"flops":1.0', b'"flops":NaN'),
    "duplicate-key": orjson.dumps([_step(0)]).replace(b'"rank":0', b'"rank":0,"rank":1'),
    "content-after-array": orjson.dumps([_step(0)]) + b',"x":1',
    "second-row": orjson.dumps([_step(0)]) + b'}\n{"e":' + orjson.dumps([_step(1)]),
    "second-row-cr": orjson.dumps([_step(0)]) + b'}\r{"e":' + orjson.dumps([_step(1)]),
    "line-break-inside": orjson.dumps([_step(0)], option=orjson.OPT_INDENT_2),
    "space-first": b" " + orjson.dumps([_step(0)]),
    "non-ascii-host": orjson.dumps([_step(0, host="nöde-0")]),
    "escaped-host": orjson.dumps([_step(0, host='no"de\\0')]),
    "invalid-utf8": orjson.dumps([_step(0)]).replace(b"node-0", b"node-\xff"),
    "deep-field": orjson.dumps([_step(0)]).replace(b'"samples":8', b'"samples":8,"x":' + b"[" * 1100 + b"]" * 1100),
    "object-step": orjson.dumps(_step(0)),
    "object-device": orjson.dumps(_device(3)),
    "negative-samples": _pack(_step(0, samples=-3)),
    "huge-int-in-float": _pack(_step(0)).replace(b'"samples":8', b'"samples":100000000000000000000000'),
    "device-big": _pack(_device(70_000)),
    "device-no-job": _pack(_device(0, job=None), {k: v for k, v in _device(1).items() if k != "job"}),
    "device-float-rank": _pack(_device(0, rank=1.5)),
    "device-null-rank": _pack(_device(0, rank=None)),
    "device-zero-ts": _pack(_device(0, ts_ns=0)),
    "device-empty-host": _pack(_device(0, host="")),
    "device-nan": _pack(_device(0)).replace(b'"power_w":300.0', b'"power_w":NaN'),
    "job-start": orjson.dumps({"type": "job", "v": "1.4", "job": "j", "phase": "start", "world": 4, "ts_ns": 10**18}),
    "job-end": orjson.dumps({"type": "job", "v": "1.4", "job": "j", "phase": "end", "world": 4, "ts_ns": 10**18,
                             "last_step": 7}),
    "too-big": _pack(*[_step(r % 4, step=r) for r in range(3000)]),
    "tombstone": None,  # type: ignore[dict-item]
    "memory": _pack(_step(0, v="1.5", mem_peak_bytes=70 * 2**30, mem_reserved_bytes=80 * 2**30,
                          mem_capacity_bytes=96 * 2**30), _step(1)),
    "memory-capacity-zero": _pack(_step(0, mem_capacity_bytes=0), _step(1, mem_capacity_bytes=-5)),
    "memory-peak-only": _pack(_step(0, mem_peak_bytes=0), _step(1, mem_reserved_bytes=2**63 - 1)),
    "memory-null": _pack(_step(0, mem_peak_bytes=None, mem_reserved_bytes=None)),
    "memory-negative": _pack(_step(0, mem_peak_bytes=-1)),
    "memory-float": _pack(_step(0, mem_reserved_bytes=1.5)),
    "memory-huge": _pack(_step(0)).replace(b'"samples":8', b'"samples":8,"mem_peak_bytes":100000000000000000000'),
    "job-start-shape": orjson.dumps({"type": "job", "v": "1.5", "job": "j", "phase": "start", "world": 4,
                                     "ts_ns": 10**18, "model_shape": {"params": 10**9, "layers": 24,
                                                                      "optimizer": "adam"}}),
    "job-start-bad-shape": orjson.dumps({"type": "job", "v": "1.5", "job": "j", "phase": "start", "world": 4,
                                         "ts_ns": 10**18, "model_shape": {"layers": 0}}),
    "kernel-good": _pack(_summary(1)),
    "kernel-object": orjson.dumps(_summary(1)),
    "kernel-rank-outside-world": _pack(_summary(4)),
    "kernel-null-entries": _pack(_summary(1, entries=None)),
    "kernel-no-entries": _pack({k: v for k, v in _summary(1).items() if k != "entries"}),
    "kernel-empty-entries": _pack(_summary(1, entries=[])),
    "kernel-null-other": _pack(_summary(1, other_ns=None)),
    "kernel-no-other": _pack({k: v for k, v in _summary(1).items() if k != "other_ns"}),
    "kernel-float-other": _pack(_summary(1, other_ns=2.5)),
    "kernel-attempt-2": _pack(_summary(1, attempt=2), _summary(2)),
    "kernel-other-job": _pack(_summary(1, job="k"), _summary(2)),
    "kernel-version-2": _pack(_summary(1, v="2.0")),
    "kernel-entry-no-key": _pack(_entry(key=None)),
    "kernel-entry-int-key": _pack(_entry(key=5)),
    "kernel-entry-float-total": _pack(_entry(total_ns=5.0)),
    "kernel-entry-bool-total": _pack(_entry(total_ns=True)),
    "kernel-entry-negative-total": _pack(_entry(total_ns=-5)),
    "kernel-entry-float-count": _pack(_entry(count=2.0)),
    "kernel-entry-no-count": _pack({**_summary(1), "entries": [{"key": "x", "total_ns": 5}]}),
    "kernel-entry-int-flops": _pack(_entry(flops=7)),
    "kernel-entry-int-cat": _pack(_entry(cat=5)),
    "kernel-entry-odd-cat": _pack(_entry(cat="odd")),
    "kernel-entry-shape": _pack(_entry(shape={"m": 8, "n": 8})),
    "kernel-entry-float-shape": _pack(_entry(shape={"m": 8.5})),
    "kernel-entry-unknown": _pack(_entry(extra=1)),
    "kernel-entry-huge-bytes": _pack(_summary(1)).replace(b'"bytes":4096', b'"bytes":100000000000000000000000'),
    "kernel-entry-u64-bytes": _pack(_entry(bytes=2**64 - 1)),
    "kernel-entry-null-direction": _pack(_entry(direction=None)),
    "kernel-entry-list": _pack({**_summary(1), "entries": [["x", 5]]}),
    "kernel-in-device": _pack(_device(0), _summary(1)),
}


# every hand-built record among steps and device samples, and the kernel-summary ones among summaries too
PLACES = [(name, "steps") for name in BAD_RECORDS] + [(n, "kernels") for n in BAD_RECORDS if n.startswith("kernel-")]


@pytest.mark.parametrize(("name", "among"), PLACES)
@pytest.mark.parametrize("where", [0, 1, 3])
def test_a_hand_built_record_decodes_alike_anywhere_in_a_batch(name: str, among: str, where: int) -> None:
    batch: list[Any] = list(GOOD if among == "steps" else GOOD_KERNELS)
    batch.insert(where, BAD_RECORDS[name])
    old, new, _ = _both(batch)
    assert old == new


def test_the_per_event_path_counts_what_the_columns_hand_back() -> None:
    """A batch with one bad element among good ones: the columnar path declines, the good ones go through."""
    batch = [*GOOD, BAD_RECORDS["rank-outside-world"]]
    assert decode_module._decode_columnar(batch, MAX) is None
    chunks, stats = decode_batch(batch, MAX)
    assert (stats.events, stats.bad) == (8, 1)
    assert [r for c in chunks if c["kind"] == "steps" for r in c["rank"]] == [0, 1, 2, 3, 0]


def test_a_clean_batch_stays_columnar() -> None:
    assert decode_module._decode_columnar([*GOOD, BAD_RECORDS["memory"], BAD_RECORDS["memory-peak-only"]],
                                          MAX) is not None  # contract 1.5's memory: no reason to decline
    assert columns.read_packed("step", [BAD_RECORDS["memory"]]) is not None  # the compiled reader takes it too
    assert decode_module._decode_columnar(GOOD_KERNELS, MAX) is not None
    assert decode_module._decode_columnar(GOOD, MAX) is not None
    assert decode_module._decode_columnar([*GOOD, BAD_RECORDS["job-start"], BAD_RECORDS["object-step"]],
                                          MAX) is not None


MUTANTS: list[Any] = [None, -1, 0, 1, 2**63, 2**64 - 1, 1.5, -0.0, 1e300, "", "x", "1.4", True, [], {}, {"group": 1}]
FIELDS = ["type", "v", "job", "rank", "world", "host", "device", "step", "start_ns", "end_ns", "attempt",
          "samples", "batch_size", "phases", "domains", "ts_ns", "power_w", "flops", "profiling", "mem_peak_bytes",
          "mem_reserved_bytes", "mem_capacity_bytes"]


def test_random_mutations_decode_alike() -> None:
    """One field of one element set to an odd value (or dropped), many times over: always the same result."""
    rng = random.Random(25)
    for _ in range(400):
        docs = [[_step(r) for r in range(4)], [_device(d) for d in range(4)]]
        target = rng.choice(docs)[rng.randrange(4)]
        name = rng.choice(FIELDS)
        if rng.random() < 0.2:
            target.pop(name, None)
        else:
            target[name] = rng.choice(MUTANTS)
        batch = [_pack(*docs[0][:2]), _pack(*docs[1]), _pack(*docs[0][2:])]
        old, new, _ = _both(batch)
        assert old == new, (name, target.get(name))


KERNEL_FIELDS = ["key", "cat", "count", "total_ns", "max_ns", "metric", "shape", "flops", "op", "domain",
                 "group_size", "bytes", "direction", "launch_mean_us", "launch_mad_us"]


def test_random_mutations_of_kernel_summaries_decode_alike() -> None:
    """One field of one summary, or of one of its aggregates, set to an odd value (or dropped)."""
    rng = random.Random(26)
    for _ in range(400):
        docs = [_summary(r) for r in range(4)]
        target = docs[rng.randrange(4)]
        if rng.random() < 0.5:
            target, name = rng.choice(target["entries"]), rng.choice(KERNEL_FIELDS)
        else:
            name = rng.choice([*FIELDS[:8], "attempt", "entries", "other_ns", "other_count", "dropped"])
        if rng.random() < 0.2:
            target.pop(name, None)
        else:
            target[name] = rng.choice(MUTANTS)
        old, new, _ = _both([_pack(*docs[:2]), _pack(_step(0)), _pack(*docs[2:])])
        assert old == new, (name, target.get(name))


def test_the_columnar_decode_is_on_by_default_and_a_variable_turns_it_off() -> None:
    assert load_settings(env={}).detect_columnar_decode is True
    assert load_settings(env={"STEPLENS_DETECT_COLUMNAR_DECODE": "false"}).detect_columnar_decode is False


def test_a_declined_batch_is_marked_and_the_backoff_skips_the_next_ones() -> None:
    assert decode_batch(GOOD, MAX)[1].declined is False
    assert decode_batch([*GOOD, BAD_RECORDS["rank-outside-world"]], MAX)[1].declined is True
    assert decode_batch([*GOOD, BAD_RECORDS["rank-outside-world"]], MAX, columnar=False)[1].declined is False
    backoff = ColumnarBackoff(skip=2)
    tried = []
    for bad in (False, True, False, False, False, True, True, False, False, False):
        use = backoff.use()
        tried.append(use)
        backoff.after(decode_batch([*GOOD, BAD_RECORDS["rank-outside-world"]] if bad else GOOD, MAX, use)[1]
                      .declined)
    assert tried == [True, True, False, False, True, True, False, False, True, True]


def _by_kind(raws: list[Any]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for raw in raws:
        kind = columns.sniff(raw) if isinstance(raw, bytes) else None
        if kind in columns.DECODERS:
            out.setdefault(kind, []).append(raw)
    return out


def test_the_compiled_reader_takes_clean_batches() -> None:
    """The simulator's records and the hand-built good ones are read by the compiled reader, not handed on."""
    raws = _stream([SimRun(scenario_job("healthy", ranks=16, steps=3, seed=1, job_id="j"))])
    for batch in (raws, GOOD, GOOD_KERNELS):
        by_kind = _by_kind(batch)
        assert by_kind
        for kind, records in by_kind.items():
            assert columns.read_packed(kind, records) is not None, kind


@pytest.mark.parametrize("name", [n for n in BAD_RECORDS if BAD_RECORDS[n] is not None])
def test_the_compiled_reader_and_the_structs_give_the_same_chunks(name: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """Whatever the compiled reader accepts it reads as the structs do (the result compared as bytes), and
    what it declines the structs read (or decline) as before."""
    batch = [*GOOD, *GOOD_KERNELS, BAD_RECORDS[name]]
    compiled = {kind: columns.DECODERS[kind](list(range(len(raws))), raws) for kind, raws in _by_kind(batch).items()}
    monkeypatch.setattr(columns, "read_packed", lambda kind, raws: None)
    structs = {kind: columns.DECODERS[kind](list(range(len(raws))), raws) for kind, raws in _by_kind(batch).items()}
    assert _spelled(compiled) == _spelled(structs)


def _spelled(decoded: dict[str, list[columns.Placed] | None]) -> bytes:
    """Decoded chunks as bytes: values (NaN spelled out) and each column's type (a list or an array)."""
    return orjson.dumps({kind: None if placed is None else [
        [at, key, nan_spelled(chunk), {name: type(col).__name__ for name, col in chunk.items()}]
        for at, key, chunk in placed] for kind, placed in decoded.items()})


def test_memory_rides_the_step_chunk_only_where_a_row_has_it() -> None:
    """Contract 1.5: a step's device memory reaches detection (NaN for a row without it), both paths alike,
    through the partials topic's frame; a chunk with no memory has no memory columns."""
    from streams.detect.combine.chunks import dumps_split, loads

    batch = [_pack(_step(0), _step(1, mem_peak_bytes=5 * 2**30, mem_reserved_bytes=6 * 2**30,
                                   mem_capacity_bytes=64 * 2**30)),
             _pack(_step(2, mem_peak_bytes=-1), _step(3, mem_reserved_bytes=2**40))]
    for columnar in (False, True):
        (chunk,), _ = decode_batch(batch, MAX, columnar=columnar)
        (frame,) = dumps_split(chunk)
        for c in (chunk, loads(frame)):
            peak = [None if v != v else v for v in c["mem_peak"]]  # type: ignore[typeddict-item]
            reserved = [None if v != v else v for v in c["mem_reserved"]]  # type: ignore[typeddict-item]
            capacity = [None if v != v else v for v in c["mem_capacity"]]  # type: ignore[typeddict-item]
            assert peak == [None, 5 * 2**30, None, None] and reserved == [None, 6 * 2**30, None, 2**40]
            assert capacity == [None, 64 * 2**30, None, None]
    assert _both(batch)[2]  # the columnar path kept the batch
    for columnar in (False, True):
        (plain,), _ = decode_batch(GOOD[:1], MAX, columnar=columnar)
        assert "mem_peak" not in plain and "mem_reserved" not in plain
