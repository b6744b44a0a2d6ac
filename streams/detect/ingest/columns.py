"""Packed step and device records straight to column chunks, in C (pyarrow's JSON reader), no dict per event.

Why: the per-event decode (streams/detect/ingest/decode.py) builds an orjson dict per event and
checks it field by field in Python, ~4 µs an event, 4× what a plain consumer pays to parse the same
bytes (issue #25). Here one batch's records of one kind are read as one NDJSON buffer with an
explicit schema (every field the contract has for that type, unknown fields an error), and the
checks detection applies are done on the columns.

This path only ever returns the chunks the per-event path would return; whenever it cannot be sure
of that it returns None and the caller decodes the batch event by event, which finds and counts
the bad elements alone. None on: a read error (a wrong-typed value, a duplicate or unknown field,
invalid JSON or UTF-8), any element the per-event checks would reject, a NaN or infinity (pyarrow reads
them, orjson refuses the record), and a `null` where the per-event path reads it unlike a missing
field (step `host`, `attempt`, `domains.pp.index`). With unknown fields an error, a record cannot
smuggle content after its array (`[...],"x":1` is a second top-level field) and no ignored field
can hide nesting that orjson refuses; a record that adds a line adds a row, and the row count is checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from schemas.bounds import UINT16, UINT32
from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.packing import MAX_PACKED_EVENTS
from schemas.step import Phases
from schemas.version import major_ok

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
U32 = UINT32[1]
U16 = UINT16[1]


def packed_schema(element: pa.DataType) -> pa.Schema:
    """The schema `read` gives pyarrow: one line per record, its elements as the list `e`."""
    return pa.schema([("e", pa.list_(element))])


DOMAIN = pa.struct([("group", pa.int64()), ("size", pa.int64()), ("index", pa.int64())])
IDENTITY = [("type", pa.string()), ("v", pa.string()), ("job", pa.string()), ("rank", pa.int64()),
             ("world", pa.int64()), ("host", pa.string()), ("device", pa.int64()),
             ("domains", pa.struct([(d, DOMAIN) for d in DOMAIN_TYPES])), ("attempt", pa.int64())]
# every field of the contract's step event (schemas/step.py); the ones detection reads through `_num`
# (samples, batch_size) as doubles, since the per-event path takes an int or a float there alike
STEP = pa.struct([*IDENTITY, ("step", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
                  ("phases", pa.struct([(p, pa.float64()) for p in Phases.NAMES])),
                  ("gc_count", pa.int64()), ("batch_size", pa.float64()), ("samples", pa.float64()),
                  ("tokens", pa.int64()), ("flops", pa.float64()), ("peak_flops", pa.float64()),
                  ("profiling", pa.bool_())])
DEVICE = pa.struct([("type", pa.string()), ("v", pa.string()), ("host", pa.string()), ("device", pa.int64()),
                    ("ts_ns", pa.int64()), ("job", pa.string()), ("rank", pa.int64()),
                    ("device_kind", pa.string()), *[(m, pa.float64()) for m in METRICS]])
KINDS: dict[str, pa.DataType] = {"step": STEP, "device": DEVICE}
_SCHEMAS = {kind: packed_schema(element) for kind, element in KINDS.items()}
# fields whose `null` the per-event path reads unlike their absence: present only when not null
_NOT_NULL = {"step": (b'"attempt"', "attempt"), "device": None}


def attempt_key(job: str, attempt: int) -> str:
    """Chunks are per job AND attempt: a batch may hold a relaunch's first steps and the late
    last steps of the attempt before it, which the engine must tell apart."""
    return f"{attempt}:{job}"  # attempt first: no job name can make two jobs' keys meet


def sniff(raw: bytes) -> str | None:
    """The event type a record's first element states, when the record is an array or object that
    starts with its `type` (orjson's encoding of the contract's events); None otherwise."""
    if raw[:10] == b'[{"type":"':
        start = 10
    elif raw[:9] == b'{"type":"':
        start = 9
    else:
        return None
    end = raw.find(b'"', start, start + 20)
    return raw[start:end].decode("ascii", "replace") if end > 0 else None


# A fast chunk: (position of its first element (record index, element index), chunk key, chunk)
Placed = tuple[tuple[int, int], str, dict[str, Any]]


def read(kind: str, raws: list[bytes], schema: pa.Schema | None = None) -> tuple[pa.StructArray, IntArray] | None:
    """The records' elements as one struct array, and each record's element count; None: not sure.

    `schema` (from `packed_schema`) replaces `kind`'s when a reader needs other column types (landing)."""
    buf = b'{"e":' + b'}\n{"e":'.join([raw if raw[:1] == b"[" else b"[" + raw + b"]" for raw in raws]) + b"}\n"
    try:
        table = pj.read_json(pa.BufferReader(buf),
                             read_options=pj.ReadOptions(use_threads=False, block_size=len(buf) + 1),
                             parse_options=pj.ParseOptions(explicit_schema=schema or _SCHEMAS[kind],
                                                           unexpected_field_behavior="error"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None
    if table.num_rows != len(raws) or table.num_columns != 1:
        return None  # a record with a line break of its own
    lists = table.column(0).combine_chunks()
    if lists.null_count:
        return None
    counts = np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    if counts.size and (counts.min() < 1 or counts.max() > MAX_PACKED_EVENTS):
        return None
    events = lists.flatten()
    if events.null_count or not _finite(events):
        return None
    if not buf.isascii():  # pyarrow does not check UTF-8 as it reads (orjson refuses the record)
        try:
            events.validate(full=True)
        except pa.ArrowInvalid:
            return None
    not_null = _NOT_NULL.get(kind)  # a landing-only kind (kernel_summary): its reader declines every `null`
    if not_null is not None:
        token, name = not_null
        column = events.field(name)
        if column.null_count and buf.count(token) != len(column) - column.null_count:
            return None  # some element states it as null (or the name stands in a string value too: unsure)
    return events, counts


def _finite(array: pa.Array) -> bool:
    """No NaN or infinity in any float field, nested ones included (JSON has neither; orjson refuses them,
    pyarrow reads them)."""
    if pa.types.is_list(array.type):
        return _finite(array.flatten())
    if pa.types.is_struct(array.type):
        return all(_finite(array.field(i)) for i in range(array.type.num_fields))
    if pa.types.is_floating(array.type):
        values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.float64)  # nulls are NaN
        return bool(int(np.isfinite(values).sum()) + int(array.null_count) == len(array))
    return True


def int_column(array: pa.Array, fill: int) -> IntArray:
    """An integer column as int64 numpy, nulls as `fill`."""
    if array.null_count:
        array = pc.fill_null(array, fill)
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)


def _ints(array: pa.Array, fill: int | None = None) -> IntArray | None:
    """`int_column`, or None (not sure) when a value is missing and there is no fill."""
    if array.null_count and fill is None:
        return None
    return int_column(array, 0 if fill is None else fill)


def _nums(array: pa.Array) -> FloatArray:
    """`decode._num` on a column: the value when >= 0, else (negative, missing) NaN."""
    values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.float64)  # nulls are NaN
    return np.where(values >= 0, values, np.nan)


def _strings(array: pa.Array) -> list[str] | None:
    """A string column, non-empty everywhere; None otherwise."""
    if array.null_count or pc.any(pc.equal(pc.utf8_length(array), 0)).as_py():
        return None
    return [str(s) for s in array.to_pylist()]


def _header_ok(fields: dict[str, pa.Array], kind: str) -> bool:
    """Every element's `type` is `kind` and its version one the contract accepts."""
    kinds = fields["type"]
    if kinds.null_count or fields["v"].null_count or not pc.all(pc.equal(kinds, kind)).as_py():
        return False
    return all(major_ok(v) for v in pc.unique(fields["v"]).to_pylist())


def _positions(record_ids: list[int], counts: IntArray) -> tuple[IntArray, IntArray]:
    """Each element's (record index in the batch, index inside its record)."""
    owner = np.repeat(np.arange(counts.size), counts)
    starts = np.cumsum(counts) - counts
    return np.asarray(record_ids, dtype=np.int64)[owner], np.arange(owner.size) - starts[owner]


def _groups(keys: list[Any]) -> list[tuple[Any, IntArray]]:
    """The distinct `keys` in order of first appearance, each with the element indices that carry it."""
    if all(k == keys[0] for k in keys):
        return [(keys[0], np.arange(len(keys)))]
    first: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, []).append(i)
    return [(k, np.asarray(rows, dtype=np.int64)) for k, rows in first.items()]


def _take(column: npt.NDArray[Any], rows: IntArray, whole: bool) -> list[Any]:
    return list(column.tolist()) if whole else list(column[rows].tolist())


def steps(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The step records' chunks (as `decode._add_step` builds them), or None: not sure."""
    got = read("step", raws)
    if got is None:
        return None
    events, counts = got
    fields = {f.name: events.field(i) for i, f in enumerate(STEP)}
    if not _header_ok(fields, "step"):
        return None
    rank, world, step = _ints(fields["rank"]), _ints(fields["world"]), _ints(fields["step"])
    start, end, attempt = _ints(fields["start_ns"]), _ints(fields["end_ns"]), _ints(fields["attempt"], 0)
    jobs = _strings(fields["job"])
    if rank is None or world is None or step is None or start is None or end is None or attempt is None \
            or jobs is None:
        return None
    ok = ((rank >= 0) & (rank < world) & (world <= U32) & (step >= 0) & (start > 0) & (start <= end)
          & (attempt >= 0) & (attempt <= U16))
    if not ok.all():
        return None
    if fields["host"].null_count:
        return None  # missing reads "", null "None" in the per-event path
    host = fields["host"].to_pylist()
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {
        "rank": rank, "step": step, "host": host, "start_ns": start, "end_ns": end,
        "samples": _nums(fields["samples"]), "batch": _nums(fields["batch_size"])}
    phases = fields["phases"]
    for i, name in enumerate(Phases.NAMES):
        cols[name] = _nums(phases.field(i)) if phases.null_count == 0 else _nums(
            pc.if_else(pc.is_valid(phases), phases.field(i), pa.scalar(None, pa.float64())))
    domains = fields["domains"]
    for i, dom in enumerate(DOMAIN_TYPES):
        d = domains.field(i)
        present = np.asarray(pc.and_(pc.is_valid(domains), pc.is_valid(d)).to_numpy(zero_copy_only=False),
                             dtype=bool)
        group = _ints(d.field(0), -1)
        size = _ints(d.field(1), 0)
        valid = present & np.asarray(pc.and_(pc.is_valid(d.field(0)), pc.is_valid(d.field(1)))
                                     .to_numpy(zero_copy_only=False), dtype=bool)
        assert group is not None and size is not None
        cols[f"g_{dom}"] = np.where(valid, group, -1)
        cols[f"n_{dom}"] = np.where(valid, size, 0)
        if dom == "pp":
            index = _ints(d.field(2), -1)
            assert index is not None
            if (present & ~np.asarray(d.field(2).is_valid().to_numpy(zero_copy_only=False), dtype=bool)).any():
                return None  # a stage without its index: missing reads -1, null None in the per-event path
            cols["stage"] = np.where(present, index, -1)
    at, inside = _positions(record_ids, counts)
    out: list[Placed] = []
    groups = _groups(list(zip(jobs, attempt.tolist(), strict=True)))
    whole = len(groups) == 1
    for (job, att), rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "steps", "job": job, "attempt": att, "world": int(world[rows].max())}
        for name in ("rank", "step", "host", "start_ns", "end_ns", "samples", "batch", *Phases.NAMES):
            chunk[name] = _column(cols[name], rows, whole)
        for dom in DOMAIN_TYPES:
            chunk[f"g_{dom}"] = _column(cols[f"g_{dom}"], rows, whole)
            chunk[f"n_{dom}"] = _column(cols[f"n_{dom}"], rows, whole)
        chunk["stage"] = _column(cols["stage"], rows, whole)
        out.append(((int(at[first]), int(inside[first])), f"steps:{attempt_key(job, att)}", chunk))
    return out


def _column(values: npt.NDArray[Any] | list[Any], rows: IntArray, whole: bool) -> list[Any]:
    if isinstance(values, list):
        return list(values) if whole else [values[i] for i in rows.tolist()]
    return _take(values, rows, whole)


def device(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The device records' chunks (as `decode._add_device` builds them), or None: not sure."""
    got = read("device", raws)
    if got is None:
        return None
    events, counts = got
    fields = {f.name: events.field(i) for i, f in enumerate(DEVICE)}
    if not _header_ok(fields, "device"):
        return None
    hosts = _strings(fields["host"])
    dev, ts = _ints(fields["device"]), _ints(fields["ts_ns"])
    if hosts is None or dev is None or ts is None or not ((dev >= 0) & (dev <= U16) & (ts > 0)).all():
        return None
    rank = _ints(fields["rank"], -1)
    assert rank is not None
    jobs = pc.fill_null(fields["job"], "").to_pylist()
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {"host": hosts, "device": dev, "rank": rank, "ts_ns": ts}
    for m in METRICS:
        cols[m] = _nums(fields[m])
    at, inside = _positions(record_ids, counts)
    groups = _groups(jobs)
    whole = len(groups) == 1
    out: list[Placed] = []
    for job, rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "device", "job": job}
        for name in ("host", "device", "rank", "ts_ns", *METRICS):
            chunk[name] = _column(cols[name], rows, whole)
        out.append(((int(at[first]), int(inside[first])), f"device:{job}", chunk))
    return out


DECODERS = {"step": steps, "device": device}
