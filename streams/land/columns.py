"""A batch's step (device, kernel-summary) records straight to one Arrow block of the steps (device_samples,
kernel_summaries) table: no dict, tuple or row per event.

Why: per event, landing paid an orjson dict, `sinks.fast_rows`' checks in Python, a row tuple, and
then the embedded backend turned the tuples back into Arrow columns (issue #25). Here a batch's
records of one of these topics are read as one buffer by pyarrow with an explicit schema
(`streams.land.arrow_read`) and the table's columns are computed on the columns.

This path only ever yields the rows `sinks.fast_rows` would yield, for a batch in which every
element is one the fast mapping accepts; whenever it cannot be sure of that it returns None and the
processor lands that topic's records of the batch one by one, as before (the full decoder then finds and
dead-letters the bad elements alone). None on: anything `read` refuses (a wrong-typed, unknown or
duplicate field, invalid JSON or UTF-8, NaN or infinity, an empty or oversized array), any value out
of the fast mapping's ranges, a version it does not take, and any record that says `null` anywhere:
pyarrow reads a null like a missing field, which the fast mapping tells apart (`"profiling": null`
is declined there), so a batch without the word has no nulls but missing fields.
"""

from __future__ import annotations

from typing import get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import bounds
from schemas.device import METRICS, PERCENT_FIELDS
from schemas.identity import DOMAIN_TYPES
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory
from schemas.kernel_summary import MAX_AGGREGATES_PER_SUMMARY
from schemas.step import Phases
from sinks.fast_rows import VERSIONS
from sinks.rows import DEVICE_SAMPLE_COLUMNS, KERNEL_SUMMARY_COLUMNS, NO_GROUP, NO_RANK, STEP_COLUMNS
from streams.land.arrow_read import DEVICE, IDENTITY, STEP, int_column, packed_schema, read

_SCHEMA = packed_schema(STEP)
_DEVICE_SCHEMA = packed_schema(DEVICE)
_VERSIONS = pa.array(sorted(VERSIONS))  # the versions the fast mapping takes
_I64, _U32, _I32 = bounds.INT64[1], bounds.UINT32[1], bounds.INT32[1]
_NS_DAY = 86_400_000_000_000
_LAST_DAY = 65_535  # 2149-06-06, the last ClickHouse Date (sinks.rows.event_date clamps there)
_COUNTS = ("gc_count", "batch_size", "samples", "tokens")
_MEMORY = ("mem_peak_bytes", "mem_reserved_bytes", "mem_capacity_bytes")  # contract 1.5, >= 0, null when missing


def _ids_ok(array: pa.Array) -> bool:
    """Every value present, 1 to MAX_ID_CHARS characters (the fast mapping's `_id`)."""
    if array.null_count:
        return False
    length = pc.utf8_length(array)
    return bool(pc.min(length).as_py() >= 1 and pc.max(length).as_py() <= bounds.MAX_ID_CHARS)


def _at_least(array: pa.Array, low: float) -> bool:
    """Every present value >= low (None when all are missing counts as fine)."""
    if array.null_count == len(array):
        return True
    smallest = pc.min(array).as_py()
    return smallest is None or smallest >= low


def _fields(kind: str, raws: list[bytes], ingested_ns: int, element: pa.DataType, schema: pa.Schema,
            required: tuple[str, ...]) -> dict[str, pa.Array] | None:
    """The elements' fields by name when they read, are all `kind` of a version the fast mapping takes, and
    have every `required` field; None otherwise."""
    if not 0 <= ingested_ns <= _I64:
        return None
    got = read(raws, schema, refuse_null=True)
    if got is None:
        return None
    events = got[0]
    f = {field.name: events.field(i) for i, field in enumerate(element)}
    if any(f[name].null_count for name in required):
        return None
    if not pc.all(pc.equal(f["type"], kind)).as_py() or not pc.all(pc.is_in(f["v"], _VERSIONS)).as_py():
        return None
    return f


def _days(ns: np.ndarray) -> pa.Array:
    """`sinks.rows.event_date` of positive epoch-ns timestamps, as a Date column."""
    return pa.array(np.minimum(ns // _NS_DAY, _LAST_DAY).astype(np.int32)).cast(pa.date32())


_Identity = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]


def _identity(f: dict[str, pa.Array]) -> _Identity | None:
    """(rank, world, device, attempt, groups in DOMAIN_TYPES order, pp stage) of the elements, checked as
    the fast mapping's `_identity` checks them (job and host ids included; and `attempt` 0 to 65535);
    None: one is out of range."""
    if not (_ids_ok(f["job"]) and _ids_ok(f["host"])):
        return None
    world, rank, device = int_column(f["world"], 0), int_column(f["rank"], 0), int_column(f["device"], 0)
    attempt = int_column(f["attempt"], 0)
    ok = ((world >= 1) & (world <= _U32) & (rank >= 0) & (rank < world) & (device >= 0) & (device <= bounds.UINT16[1])
          & (attempt >= 0) & (attempt <= bounds.UINT16[1]))
    if not ok.all():
        return None
    domains = f["domains"].flatten() if f["domains"].null_count else [f["domains"].field(i)
                                                                       for i in range(len(DOMAIN_TYPES))]
    groups: list[np.ndarray] = []
    absent = np.full(len(rank), NO_GROUP, dtype=np.int64)
    stage = absent
    for name, dom in zip(DOMAIN_TYPES, domains, strict=True):
        present = np.asarray(dom.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not present.any():
            groups.append(absent)
            continue
        parts = dom.flatten()  # group, size, index with the domain's own nulls
        if any(int(pc.sum(pc.and_(dom.is_valid(), part.is_null())).as_py() or 0) for part in parts):
            return None  # a domain without all three of group, size, index
        group, size, index = (int_column(part, 0) for part in parts)
        ok = ~present | ((size >= 1) & (size <= world) & (index >= 0) & (index < size)
                         & (group >= 0) & (group <= _I32))
        if name == "pp":
            ok &= ~present | (index <= bounds.INT16[1])
            stage = np.where(present, index, NO_GROUP)
        if not ok.all():
            return None
        groups.append(np.where(present, group, NO_GROUP))
    return rank, world, device, attempt, groups, stage


def step_block(raws: list[bytes], ingested_ns: int) -> pa.Table | None:
    """The steps table's rows of `raws` (step records, objects or arrays) as one Arrow table in
    `STEP_COLUMNS` order, the same values `sinks.fast_rows` gives them; None: not sure (land them one by one)."""
    f = _fields("step", raws, ingested_ns, STEP, _SCHEMA,
                ("type", "v", "job", "rank", "world", "host", "device", "step", "start_ns", "end_ns"))
    got = _identity(f) if f is not None else None
    if f is None or got is None:
        return None
    rank, world, device, attempt, groups, stage = got
    count = len(rank)
    step, start, end = int_column(f["step"], 0), int_column(f["start_ns"], 0), int_column(f["end_ns"], 0)
    if not ((step >= 0) & (start >= 1) & (end >= start)).all():
        return None
    phases = f["phases"].flatten() if f["phases"].null_count else [f["phases"].field(i)
                                                                   for i in range(len(Phases.NAMES))]
    if not all(_at_least(p, 0.0) for p in phases):
        return None
    if not all(_at_least(f[name], 0) for name in (*_COUNTS, *_MEMORY)) or not all(
            _at_least(f[name], 0.0) for name in ("flops", "peak_flops")):
        return None
    profiling = pc.cast(pc.fill_null(f["profiling"], False), pa.uint8())
    columns = [
        f["job"], rank, step, world, f["host"], device, *groups, stage, start, end, (end - start) / 1e6,
        *phases, *(f[name] for name in _COUNTS), f["flops"], f["peak_flops"], profiling,
        _days(start), np.full(count, ingested_ns, dtype=np.int64), attempt, *(f[name] for name in _MEMORY),
    ]
    arrays = [c if isinstance(c, pa.Array) else pa.array(c) for c in columns]
    return pa.Table.from_arrays(arrays, names=list(STEP_COLUMNS))


def _at_most(array: pa.Array, high: float) -> bool:
    """Every present value <= high."""
    if array.null_count == len(array):
        return True
    largest = pc.max(array).as_py()
    return largest is None or largest <= high


def _opt_text(array: pa.Array) -> pa.Array | None:
    """An optional text column as the fast mapping lands it (missing: ""), or None when one is too long."""
    if array.null_count < len(array) and not _at_most(pc.utf8_length(array), bounds.MAX_ID_CHARS):
        return None
    return pc.fill_null(array, "") if array.null_count else array


def device_block(raws: list[bytes], ingested_ns: int) -> pa.Table | None:
    """The device_samples table's rows of `raws` as one Arrow table in `DEVICE_SAMPLE_COLUMNS` order, the
    values `sinks.fast_rows` gives them; None: not sure (land them one by one)."""
    f = _fields("device", raws, ingested_ns, DEVICE, _DEVICE_SCHEMA, ("type", "v", "host", "device", "ts_ns"))
    if f is None or not _ids_ok(f["host"]):
        return None
    device, ts = int_column(f["device"], 0), int_column(f["ts_ns"], 0)
    rank = int_column(f["rank"], NO_RANK)
    present = np.asarray(f["rank"].is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if not ((device >= 0) & (device <= bounds.UINT16[1]) & (ts >= 1)
            & (~present | ((rank >= 0) & (rank <= _U32)))).all():
        return None
    job, kind = _opt_text(f["job"]), _opt_text(f["device_kind"])
    if job is None or kind is None or not _at_least(f["power_w"], 0.0):
        return None
    if not all(_at_least(f[name], 0.0) and _at_most(f[name], 100.0) for name in PERCENT_FIELDS):
        return None
    columns = [f["host"], device, ts, job, rank, kind, *(f[name] for name in METRICS), _days(ts),
               np.full(len(ts), ingested_ns, dtype=np.int64)]
    arrays = [c if isinstance(c, pa.Array) else pa.array(c) for c in columns]
    return pa.Table.from_arrays(arrays, names=list(DEVICE_SAMPLE_COLUMNS))


# every field of the contract's kernel aggregate but `shape` (schemas/kernel_summary.py), an object with
# arbitrary keys: pyarrow's reader has no map type for it, so a record with one fails the read (unknown
# field) and its batch lands record by record. No producer here sends it (the simulator and the bench put the
# shape in the key; the rank hook only when its caller passes one). Reading it with
# unexpected_field_behavior="infer" (a struct of the keys seen) would be exact, but in that mode pyarrow 26
# recurses into any unknown field and crashes the process on one nested ~20,000 deep (error mode stops at
# the field name), which would take a depth check of every such batch before the read
_AGGREGATE = pa.struct([("key", pa.string()), ("cat", pa.string()), ("count", pa.int64()),
                        ("total_ns", pa.int64()), ("max_ns", pa.int64()), ("metric", pa.string()),
                        ("flops", pa.float64()), ("op", pa.string()), ("domain", pa.string()),
                        ("group_size", pa.int64()), ("bytes", pa.int64()), ("direction", pa.string()),
                        ("launch_mean_us", pa.float64()), ("launch_mad_us", pa.float64())])
_SUMMARY = pa.struct([*IDENTITY, ("step", pa.int64()), ("entries", pa.list_(_AGGREGATE)),
                      ("other_count", pa.int64()), ("other_ns", pa.int64()), ("dropped", pa.int64())])
_SUMMARY_SCHEMA = packed_schema(_SUMMARY)
_SUMMARY_COUNTS = ("other_count", "other_ns", "dropped")  # summary-level, >= 0, 0 when missing
_ENUMS = {"cat": pa.array(sorted(get_args(KernelCategory))), "op": pa.array(sorted(get_args(CollectiveOp))),
          "domain": pa.array(DOMAIN_TYPES), "direction": pa.array(sorted(get_args(CopyDirection)))}


def _in(array: pa.Array, name: str) -> bool:
    """Every present value of `array` one of `name`'s enum values (`index_in` is null for a missing value
    and for one outside the enum)."""
    return bool(pc.index_in(array, value_set=_ENUMS[name]).null_count == array.null_count)


def _empty_lists(count: int, values: pa.DataType) -> pa.Array:
    """`count` empty lists of `values` (an aggregate without `shape`: no keys, no values)."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, dtype=np.int32)), pa.array([], values))


def kernel_summary_block(raws: list[bytes], ingested_ns: int) -> pa.Table | None:
    """The kernel_summaries table's rows of `raws` as one Arrow table in `KERNEL_SUMMARY_COLUMNS` order: one
    row per aggregate, the summary's fields repeated on each, the values `sinks.fast_rows` gives them; None:
    not sure (land them one by one). Declined besides `_fields`' cases: an empty summary (the full path's
    special row), more than MAX_AGGREGATES_PER_SUMMARY aggregates, an aggregate with `shape` (a read error:
    see `_AGGREGATE`), so every row's shape_keys and shape_values are empty."""
    f = _fields("kernel_summary", raws, ingested_ns, _SUMMARY, _SUMMARY_SCHEMA,
                ("type", "v", "job", "rank", "world", "host", "device", "step", "entries"))
    got = _identity(f) if f is not None else None
    if f is None or got is None:
        return None
    rank, _, device, attempt, _, _ = got
    step = int_column(f["step"], 0)
    counts = [int_column(f[name], 0) for name in _SUMMARY_COUNTS]
    if not ((step >= 0) & np.logical_and.reduce([c >= 0 for c in counts])).all():
        return None
    entries = f["entries"]
    sizes = np.asarray(pc.list_value_length(entries).to_numpy(zero_copy_only=False), dtype=np.int64)
    if sizes.min() < 1 or sizes.max() > MAX_AGGREGATES_PER_SUMMARY:
        return None
    flat = entries.flatten()
    a = {field.name: flat.field(i) for i, field in enumerate(_AGGREGATE)}
    if a["cat"].null_count or a["count"].null_count or a["total_ns"].null_count or not _ids_ok(a["key"]):
        return None
    if not all(_in(a[name], name) for name in _ENUMS):
        return None
    if pc.any(pc.and_(pc.equal(a["cat"], "comm"), a["op"].is_null())).as_py():
        return None  # a collective without its op: the full path says so
    total = int_column(a["total_ns"], 0)
    max_ns, group_size = int_column(a["max_ns"], 0), int_column(a["group_size"], 1)
    if not ((int_column(a["count"], 0) >= 1) & (total >= 0) & (max_ns >= 0) & (max_ns <= total)
            & (group_size >= 1) & (group_size <= _U32)).all():
        return None  # a missing max_ns reads 0 here, a missing group_size 1: both in range
    if not (_at_least(a["bytes"], 0) and all(_at_least(a[name], 0.0)
                                             for name in ("flops", "launch_mean_us", "launch_mad_us"))):
        return None
    if a["metric"].null_count < len(flat) and not _at_most(pc.utf8_length(a["metric"]), bounds.MAX_ID_CHARS):
        return None
    parent = np.repeat(np.arange(len(sizes)), sizes)  # each aggregate's summary
    index = np.arange(len(parent)) - (np.cumsum(sizes) - sizes)[parent]
    take = pa.array(parent)
    columns = [
        f["job"].take(take), rank[parent], step[parent], f["host"].take(take), device[parent], index, sizes[parent],
        a["key"], a["cat"], a["count"], a["total_ns"], a["max_ns"], a["metric"],
        _empty_lists(len(parent), pa.string()), _empty_lists(len(parent), pa.int64()),
        a["flops"], a["op"], a["domain"], a["group_size"], a["bytes"], a["direction"],
        a["launch_mean_us"], a["launch_mad_us"], *(c[parent] for c in counts),
        _days(np.full(len(parent), ingested_ns, dtype=np.int64)), np.full(len(parent), ingested_ns, dtype=np.int64),
        attempt[parent],
    ]
    arrays = [c if isinstance(c, pa.Array) else pa.array(c) for c in columns]
    return pa.Table.from_arrays(arrays, names=list(KERNEL_SUMMARY_COLUMNS))


def kernel_summaries_in(block: pa.Table) -> int:
    """The summaries a `kernel_summary_block` holds (the events the processor counts): one row per
    aggregate, and every summary such a block holds has an aggregate 0."""
    return int(pc.sum(pc.equal(block.column("entry"), 0)).as_py() or 0)
