"""Kernel summaries land as one Arrow block per batch with exactly the per-event path's rows and dead letters.

`kernel_summary_block` must give, value for value and type for type, the rows `sinks.fast_rows` gives each
summary (one per aggregate, the summary's fields repeated), and hand back (None) every batch holding an
element the fast mapping would not take, so the processor lands that batch record by record as before:
the throughput bench's records, hand-built summaries with every optional field present and absent, and
every out-of-contract shape the fast mapping declines, each alone and among good records.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest

from bench.throughput import Job
from schemas import bounds
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory
from schemas.kernel_summary import MAX_AGGREGATES_PER_SUMMARY
from sinks.backend import arrow_rows
from sinks.embedded import EmbeddedBackend
from sinks.fast_rows import FAST_ROWS
from sinks.migrations.runner import migrate
from sinks.rows import DEAD_LETTERS_TABLE, KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS
from streams.land.columns import kernel_summaries_in, kernel_summary_block
from streams.land.processor import Landed, LandingProcessor
from tests.streams.detect.ingest.test_decode_columns import MUTANTS, _pack
from tests.streams.land.test_columns import MAX, TOPICS, Msg, _inserts, _msgs, _simulated, _write

NOW = 1_767_225_600_123_456_789
KS = TOPICS.kernel_summaries


def _agg(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": "F2:64x64x64", "cat": "compute", "count": 3, "total_ns": 9_000}
    doc.update(over)
    return doc


def _summary(rank: int = 0, *entries: dict[str, Any], **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "kernel_summary", "v": "1.4", "job": "j", "rank": rank, "world": 4,
                           "host": "node-0", "device": rank, "domains": {"dp": {"group": 0, "size": 4, "index": rank},
                                                                         "pp": {"group": 0, "size": 1, "index": 0}},
                           "step": 7, "entries": list(entries) or [_agg()]}
    doc.update(over)
    return doc


def _without(doc: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in names}


def _typed(value: Any) -> Any:
    """`value` with every scalar paired with its type: 1 and 1.0 (or True) compare unequal."""
    if isinstance(value, (list, tuple)):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _fast(raws: list[bytes], ingested_ns: int = NOW) -> list[Any] | None:
    """What the fast mapping gives every element of `raws`, in order; None when it declines one."""
    out: list[Any] = []
    for raw in raws:
        doc = orjson.loads(raw)
        for element in doc if type(doc) is list else [doc]:
            mapped = FAST_ROWS["kernel_summary"](element, ingested_ns)
            if mapped is None:
                return None
            out.extend(r.row for r in mapped)
    return out


def _same_as_fast(raws: list[bytes], ingested_ns: int = NOW) -> int:
    """Asserts the block holds the fast mapping's rows, typed, in order; the summaries it holds."""
    block = kernel_summary_block(raws, ingested_ns)
    assert block is not None
    assert tuple(block.column_names) == KERNEL_SUMMARY_COLUMNS
    expected = _fast(raws, ingested_ns)
    assert expected is not None
    assert _typed(arrow_rows(block)) == _typed(expected)
    return kernel_summaries_in(block)


def _alike(batch: list[Msg]) -> int:
    """Both landings give the same inserts (typed), dead letters and counts; the number of blocks used."""
    old = _inserts(batch, columnar=False)
    new = _inserts(batch, columnar=True)
    assert old[3] == 0
    assert _typed(old[0]) == _typed(new[0])
    assert old[1:3] == new[1:3]
    return new[3]


def _bench_records(ranks: int, step: int = 3) -> list[bytes]:
    return [value for kind, _, value in Job("ks", ranks).step(step, 0.0) if kind == "kernels"]


def test_the_bench_s_records_give_the_fast_rows() -> None:
    raws = _bench_records(256)
    assert _same_as_fast(raws) == 256
    assert _same_as_fast(raws[:1], 0) == 256 // len(raws)  # the epoch's first day
    assert _same_as_fast(raws[-1:], 2**63 - 1) > 0  # the last ClickHouse Date


def test_the_simulator_s_summaries_land_as_blocks() -> None:
    """The simulator's summaries (metric, comm with op/domain/group_size, copies with direction, launch
    latencies on some entries) all take the block."""
    messages = [m for m in _simulated("moe_imbalance") if m.topic == KS]
    assert messages
    assert _same_as_fast([m.value or b"" for m in messages]) > 0
    assert _alike(messages) == 1


_COMM = {"key": "allreduce/dp", "cat": "comm", "op": "allreduce", "domain": "dp", "group_size": 4,
         "bytes": 4_000_000, "count": 2, "total_ns": 5_000}
_COPY = {"key": "h2d", "cat": "memcpy", "direction": "h2d", "bytes": 2**40, "count": 1, "total_ns": 700}
_FULL = _agg(max_ns=4_000, metric="F2", flops=1.5e12, launch_mean_us=8.25, launch_mad_us=0.5)
_I64, _U32, _ID = 2**63 - 1, 2**32 - 1, bounds.MAX_ID_CHARS

# summaries the fast mapping lands: the block must hold exactly its rows
LANDS: dict[str, bytes] = {
    "minimal": _pack(_summary(0)),
    "every-optional": _pack(_summary(1, _FULL, _COMM, _COPY, other_count=12, other_ns=3_000, dropped=1, attempt=2)),
    "every-optional-absent-beside-present": _pack(_summary(0, _agg(), _FULL), _summary(1, _FULL, _agg())),
    "comm-every-op": _pack(_summary(0, *[{**_COMM, "key": op, "op": op} for op in
                                         get_args(CollectiveOp)])),
    "comm-op-alone": _pack(_summary(0, {"key": "barrier/-", "cat": "comm", "op": "barrier", "count": 1,
                                        "total_ns": 1})),
    "every-domain": _pack(_summary(0, *[{**_COMM, "key": d, "domain": d} for d in ("dp", "tp", "pp", "ep", "cp")])),
    "every-direction": _pack(_summary(0, *[{**_COPY, "key": d, "direction": d} for d in get_args(CopyDirection)])),
    "every-cat": _pack(_summary(0, *[_agg(key=c, cat=c) for c in get_args(KernelCategory) if c != "comm"])),
    "op-on-compute": _pack(_summary(0, _agg(op="allgather", domain="tp", direction="d2h"))),
    "max-ns-at-total": _pack(_summary(0, _agg(max_ns=9_000), _agg(max_ns=0))),
    "zeros": _pack(_summary(0, _agg(total_ns=0, max_ns=0, flops=0, bytes=0, launch_mean_us=0.0,
                                    launch_mad_us=-0.0), step=0, other_count=0, other_ns=0, dropped=0)),
    "integer-floats": _pack(_summary(0, _agg(flops=10**15, launch_mean_us=3, launch_mad_us=2**64 - 1))),
    "huge-integer-flops": _pack(_summary(0, _agg(flops=1))).replace(b'"flops":1', b'"flops":100000000000000000000001'),
    "tops": _pack(_summary(3, _agg(count=_I64, total_ns=_I64, max_ns=_I64, bytes=_I64, group_size=_U32,
                                   flops=1.7976931348623157e308), step=_I64, other_count=_I64, other_ns=_I64,
                           dropped=_I64, attempt=65_535, device=65_535)),
    "empty-metric": _pack(_summary(0, _agg(metric=""))),
    "long-texts": _pack(_summary(0, _agg(key="k" * _ID, metric="m" * _ID), job="j" * _ID, host="\u00e9" * _ID)),
    "unicode": _pack(_summary(0, _agg(key="F\u00e9:\U0001f600", metric="m\u00e9"), host="n\u00f6de")),
    "no-domains": _pack(_without(_summary(0), "domains")),
    "empty-domains": _pack(_summary(0, domains={})),
    "most-entries": _pack(_summary(0, *[_agg(key=f"k{i}", count=i + 1) for i in range(MAX_AGGREGATES_PER_SUMMARY)])),
    "object-record": orjson.dumps(_summary(2, _FULL, _COMM)),
    "line-breaks-inside": orjson.dumps([_summary(0), _summary(1)], option=orjson.OPT_INDENT_2),
    "oldest-version": _pack(_summary(0, v="1.0")),
    # a string saying null: the compiled reader knows it is a string (a `null` value declines: DECLINED)
    "null-in-a-string": _pack(_summary(0, _agg(key="null"))),
}

# summaries the block hands back (the per-event path lands them, makes the empty summary's row, or
# dead-letters them with their reason)
DECLINED: dict[str, bytes] = {
    "empty-entries": _pack(_summary(0, entries=[])),
    "too-many-entries": _pack(_summary(0, *[_agg(key=f"k{i}") for i in range(MAX_AGGREGATES_PER_SUMMARY + 1)])),
    "no-entries": _pack(_without(_summary(0), "entries")),
    "null-entries": _pack(_summary(0, entries=None)),
    "object-entries": _pack(_summary(0, entries={"a": _agg()})),
    "number-entry": _pack(_summary(0, entries=[_agg(), 5])),
    "shape": _pack(_summary(0, _agg(shape={"M": 64, "N": 64, "K": 64}))),
    "empty-shape": _pack(_summary(0, _agg(shape={}))),
    # unknown fields must stay a read error: pyarrow's "infer" mode crashes the process on this one
    "deep-shape": _pack(_summary(0, _agg(shape={}))).replace(b'"shape":{}',
                                                             b'"shape":' + b"[" * 30_000 + b"]" * 30_000),
    "unknown-entry-field": _pack(_summary(0, _agg(dtype="bf16"))),
    "unknown-summary-field": _pack(_summary(0, kernels=[])),
    "unknown-cat": _pack(_summary(0, _agg(cat="gemm"))),
    "no-cat": _pack(_summary(0, _without(_agg(), "cat"))),
    "comm-without-op": _pack(_summary(0, _without(_COMM, "op"))),
    "unknown-op": _pack(_summary(0, {**_COMM, "op": "allscatter"})),
    "unknown-domain": _pack(_summary(0, {**_COMM, "domain": "xx"})),
    "unknown-direction": _pack(_summary(0, {**_COPY, "direction": "h2x"})),
    "zero-count": _pack(_summary(0, _agg(count=0))),
    "no-count": _pack(_summary(0, _without(_agg(), "count"))),
    "float-count": _pack(_summary(0, _agg(count=1.0))),
    "bool-count": _pack(_summary(0, _agg(count=True))),
    "string-count": _pack(_summary(0, _agg(count="3"))),
    "negative-total": _pack(_summary(0, _agg(total_ns=-1))),
    "no-total": _pack(_summary(0, _without(_agg(), "total_ns"))),
    "huge-total": _pack(_summary(0, _agg(total_ns=2**63))),
    "max-over-total": _pack(_summary(0, _agg(max_ns=9_001))),
    "negative-max": _pack(_summary(0, _agg(max_ns=-1))),
    "zero-group-size": _pack(_summary(0, {**_COMM, "group_size": 0})),
    "group-size-over-u32": _pack(_summary(0, {**_COMM, "group_size": 2**32})),
    "negative-bytes": _pack(_summary(0, {**_COPY, "bytes": -1})),
    "negative-flops": _pack(_summary(0, _agg(flops=-0.5))),
    "negative-launch-mean": _pack(_summary(0, _agg(launch_mean_us=-1.0))),
    "negative-launch-mad": _pack(_summary(0, _agg(launch_mad_us=-1))),
    "nan-flops": _pack(_summary(0, _agg(flops=1.0))).replace(b'"flops":1.0', b'"flops":NaN'),
    "infinite-launch": _pack(_summary(0, _agg(launch_mean_us=1.0))).replace(b'"launch_mean_us":1.0',
                                                                              b'"launch_mean_us":Infinity'),
    "bool-flops": _pack(_summary(0, _agg(flops=True))),
    "empty-key": _pack(_summary(0, _agg(key=""))),
    "long-key": _pack(_summary(0, _agg(key="k" * (_ID + 1)))),
    "no-key": _pack(_summary(0, _without(_agg(), "key"))),
    "long-metric": _pack(_summary(0, _agg(metric="\u00e9" * (_ID + 1)))),
    "null-metric": _pack(_summary(0, _agg(metric=None))),
    "null-max": _pack(_summary(0, _agg(max_ns=None))),
    "empty-job": _pack(_summary(0, job="")),
    "long-host": _pack(_summary(0, host="h" * (_ID + 1))),
    "rank-outside-world": _pack(_summary(0), _summary(4)),
    "device-over-u16": _pack(_summary(0, device=65_536)),
    "negative-step": _pack(_summary(0, step=-1)),
    "no-step": _pack(_without(_summary(0), "step")),
    "negative-other-count": _pack(_summary(0, other_count=-1)),
    "negative-other-ns": _pack(_summary(0, other_ns=-1)),
    "negative-dropped": _pack(_summary(0, dropped=-1)),
    "attempt-over-u16": _pack(_summary(0, attempt=65_536)),
    "null-attempt": _pack(_summary(0, attempt=None)),
    "size-over-world": _pack(_summary(0, domains={"dp": {"group": 0, "size": 5, "index": 0}})),
    "pp-without-index": _pack(_summary(0, domains={"pp": {"group": 0, "size": 1}})),
    "unknown-version": _pack(_summary(0, v="1.9")),
    "major-2": _pack(_summary(0, v="2.0")),
    "step-type": _pack(_summary(0, type="step")),
    "a-step-among-them": _pack(_summary(0), {"type": "step", "v": "1.4", "job": "j", "rank": 1, "world": 4,
                                             "host": "node-0", "device": 1, "step": 7, "start_ns": 1, "end_ns": 2}),
    "duplicate-key": _pack(_summary(0)).replace(b'"count":3', b'"count":3,"count":4'),
    "not-json": _pack(_summary(0))[:-3],
    "invalid-utf8": _pack(_summary(0)).replace(b"F2:64", b"F2:\xff"),
}


@pytest.mark.parametrize("name", list(LANDS))
def test_a_summary_the_fast_mapping_lands_is_in_the_block(name: str) -> None:
    _same_as_fast([LANDS[name]])
    assert _alike(_msgs([LANDS["minimal"], LANDS[name], LANDS["every-optional"]], KS)) == 1


@pytest.mark.parametrize("name", list(DECLINED))
def test_a_summary_the_fast_mapping_declines_hands_the_batch_back(name: str) -> None:
    raws = [LANDS["every-optional"], DECLINED[name], LANDS["minimal"]]
    assert kernel_summary_block(raws, NOW) is None
    assert kernel_summary_block([DECLINED[name]], NOW) is None
    assert _alike(_msgs(raws, KS)) == 0  # landed and dead-lettered record by record, as before


def test_the_declined_shapes_are_ones_the_fast_mapping_declines_or_lands_otherwise() -> None:
    """The hand-back cases are real: each is either refused by the fast mapping or one the block cannot
    vouch for but the fast mapping lands: an aggregate's `shape`, a duplicate key, and a field that says `null`
    (an optional aggregate field's null reads like its absence on both paths, but the block declines every
    null value, as for steps; `schemas.codec.encode` leaves null fields out, so producers send none)."""
    readable_only_one_by_one = {"shape", "empty-shape", "null-metric", "null-max", "duplicate-key"}
    for name, raw in DECLINED.items():
        try:
            fast = _fast([raw])
        except orjson.JSONDecodeError:
            fast = None
        assert (fast is not None) == (name in readable_only_one_by_one), name


def test_a_kernel_summary_batch_lands_as_one_block_counted_per_summary() -> None:
    batch = _msgs([LANDS["every-optional"], LANDS["every-optional-absent-beside-present"], LANDS["minimal"]], KS)
    processor = LandingProcessor(TOPICS, MAX)
    out = Landed()
    processor.process_batch(batch, NOW, out)
    assert (len(out.blocks), out.rows, processor.counts) == (1, [], {"kernel_summary": 4})
    (block,) = out.blocks
    assert (block.table, block.columns, block.num_rows) == (KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS, 8)
    assert block.spans == ((KS, 0, 0, 0), (KS, 1, 1, 1), (KS, 2, 2, 2))


def test_the_empty_summary_s_row_and_the_dead_letters_stay_the_per_event_path_s() -> None:
    batch = _msgs([LANDS["minimal"], DECLINED["empty-entries"], DECLINED["comm-without-op"]], KS)
    out = Landed()
    processor = LandingProcessor(TOPICS, MAX)
    processor.process_batch(batch, NOW, out)
    assert not out.blocks and processor.declined == 1
    assert [(d.offset, d.problem) for d in out.dead] == [(2, "[0] is required for cat 'comm'")]
    assert [r.row[KERNEL_SUMMARY_COLUMNS.index("entry")] for r in out.rows
            if r.table == KERNEL_SUMMARIES_TABLE] == [0, -1]


FIELDS = ["type", "v", "job", "rank", "world", "host", "device", "domains", "step", "entries", "other_count",
          "other_ns", "dropped", "attempt"]
AGG_FIELDS = ["key", "cat", "count", "total_ns", "max_ns", "metric", "flops", "op", "domain", "group_size", "bytes",
              "direction", "launch_mean_us", "launch_mad_us", "shape"]


def test_random_mutations_land_alike() -> None:
    """One field of one summary or one aggregate set to an odd value (or dropped), many times over: always
    the same landing, and the block taken only where the fast mapping takes every element."""
    rng = random.Random(25)
    columnar = 0
    for _ in range(300):
        docs = [_summary(r, _FULL, dict(_COMM), dict(_COPY), other_count=1) for r in range(4)]
        target: dict[str, Any] = docs[rng.randrange(4)]
        fields = FIELDS
        if rng.random() < 0.5:
            target, fields = target["entries"][rng.randrange(3)], AGG_FIELDS
        name = rng.choice(fields)
        if rng.random() < 0.2:
            target.pop(name, None)
        else:
            target[name] = rng.choice([*MUTANTS, 65_536, 2**32, "allreduce", "tp", "d2d", "comm", "x" * (_ID + 1)])
        raws = [_pack(*docs[:2]), _pack(*docs[2:])]
        kept = _alike(_msgs(raws, KS))
        joined = b"".join(raws)
        assert kept == (_fast(raws) is not None and b'"shape"' not in joined and b"null" not in joined)
        columnar += kept
    assert 0 < columnar < 300  # both paths taken


def _contents(path: Path, batches: list[list[Msg]], columnar: bool, now: int) -> list[list[tuple[Any, ...]]]:
    backend = EmbeddedBackend(path)
    try:
        migrate(backend)
        for batch in batches:
            processor = LandingProcessor(TOPICS, MAX, columnar=columnar)
            out = Landed()
            processor.process_batch(batch, now, out)
            _write(out, backend)
            _write(out, backend)  # a retry of the same blocks: dropped by their tokens
        return [backend.query(f"SELECT * FROM {backend.database}.{table} ORDER BY ALL")
                for table in (KERNEL_SUMMARIES_TABLE, DEAD_LETTERS_TABLE)]
    finally:
        backend.close()


def test_embedded_stores_hold_the_same_tables(tmp_path: Path) -> None:
    messages = [m for m in _simulated("hung_rank") if m.topic == KS]
    bad = _msgs([DECLINED["comm-without-op"], DECLINED["empty-entries"], LANDS["tops"]], KS, first=len(messages))
    batches = [messages[:40], messages[40:] + bad]
    now = time.time_ns()  # summaries live 180 days from their ingestion day
    old = _contents(tmp_path / "old", batches, columnar=False, now=now)
    new = _contents(tmp_path / "new", batches, columnar=True, now=now)
    assert old == new and all(old)
