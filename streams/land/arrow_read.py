"""Packed records of one event type read as one buffer by pyarrow's JSON reader with an explicit schema:
the landing's way to one Arrow block per table without a dict per event (streams/land/columns.py).

`read` refuses (returns None) whatever it cannot vouch for, and the caller lands those records one by
one: a read error (a wrong-typed value, a duplicate or unknown field, invalid JSON or UTF-8), a NaN or
infinity (pyarrow reads them, orjson refuses the record), a record with a line break of its own (a second
row), an empty or oversized array. With unknown fields an error, a record cannot smuggle content after its
array (`[...],"x":1` is a second top-level field) and no ignored field can hide nesting that orjson refuses.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from schemas import packed_columns as packed
from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.packing import MAX_PACKED_EVENTS
from schemas.step import Phases

IntArray = npt.NDArray[np.int64]


def packed_schema(element: pa.DataType) -> pa.Schema:
    """The schema `read` gives pyarrow: one line per record, its elements as the list `e`."""
    return pa.schema([("e", pa.list_(element))])


DOMAIN = pa.struct([("group", pa.int64()), ("size", pa.int64()), ("index", pa.int64())])
IDENTITY = [("type", pa.string()), ("v", pa.string()), ("job", pa.string()), ("rank", pa.int64()),
             ("world", pa.int64()), ("host", pa.string()), ("device", pa.int64()),
             ("domains", pa.struct([(d, DOMAIN) for d in DOMAIN_TYPES])), ("attempt", pa.int64())]
# every field of the contract's step event (schemas/step.py)
STEP = pa.struct([*IDENTITY, ("step", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
                  ("phases", pa.struct([(p, pa.float64()) for p in Phases.NAMES])),
                  ("gc_count", pa.int64()), ("batch_size", pa.int64()), ("samples", pa.int64()),
                  ("tokens", pa.int64()), ("flops", pa.float64()), ("peak_flops", pa.float64()),
                  ("profiling", pa.bool_()), ("mem_peak_bytes", pa.int64()), ("mem_reserved_bytes", pa.int64()),
                  ("mem_capacity_bytes", pa.int64())])
DEVICE = pa.struct([("type", pa.string()), ("v", pa.string()), ("host", pa.string()), ("device", pa.int64()),
                    ("ts_ns", pa.int64()), ("job", pa.string()), ("rank", pa.int64()),
                    ("device_kind", pa.string()), *[(m, pa.float64()) for m in METRICS]])


def read(raws: list[bytes], schema: pa.Schema, refuse_null: bool = False
         ) -> tuple[pa.StructArray, IntArray] | None:
    """The records' elements as one struct array (`schema`: from `packed_schema`), and each record's element
    count; None: not sure. A `null` reads like a missing field; `refuse_null`: None when any field says `null`
    (for a caller that tells them apart).

    The compiled reader (`schemas.packed_columns`) reads what it accepts, pyarrow's JSON reader the rest (an
    escaped string, a duplicate key, a number the compiled reader leaves to others): the same array either way.
    The compiled reader marks a `null` in its columns' states; before pyarrow's reader (which does not) the
    records are searched for `null` (a string containing it declines too: the caller then reads them its own
    way). Searching every batch's bytes cost the land worker ~0.35 CPU-µs/event at 10,240 ranks."""
    element = schema.field("e").type.value_type
    fast = packed.read(raws, spec_of(element), MAX_PACKED_EVENTS)
    if fast is not None:
        if refuse_null and any((states == packed.NULL).any() for states in fast.states.values()):
            return None
        return pa.StructArray.from_arrays(_children(fast, element, ""), fields=list(element)), fast.counts
    if refuse_null and any(b"null" in raw for raw in raws):
        return None
    return _read_json(raws, schema)


@functools.cache
def spec_of(element: pa.StructType) -> packed.Spec:
    """The compiled reader's fields for a struct of this module's types (int64, float64, string, bool, struct,
    list of struct)."""
    fields: list[tuple[str, str]] = []

    def walk(struct: pa.StructType, prefix: str) -> None:
        for field in struct:
            path, t = prefix + field.name, field.type
            if pa.types.is_struct(t):
                fields.append((path, "o"))
                walk(t, path + ".")
            elif pa.types.is_list(t) and pa.types.is_struct(t.value_type):
                fields.append((path, "l"))
                walk(t.value_type, path + ".")
            else:
                fields.append((path, _KINDS[t]))

    walk(element, "")
    return packed.Spec(tuple(fields))


_KINDS = {pa.int64(): "i", pa.float64(): "f", pa.string(): "s", pa.bool_(): "b"}


def _children(c: packed.Columns, struct: pa.StructType, prefix: str) -> list[pa.Array]:
    """`struct`'s fields as Arrow arrays of the compiled reader's columns (null: missing or `null`)."""
    out: list[pa.Array] = []
    for field in struct:
        path, t = prefix + field.name, field.type
        null = c.states[path] != packed.VALUE
        if pa.types.is_struct(t):
            out.append(pa.StructArray.from_arrays(_children(c, t, path + "."), fields=list(t), mask=pa.array(null)))
        elif pa.types.is_list(t):
            items = pa.StructArray.from_arrays(_children(c, t.value_type, path + "."), fields=list(t.value_type))
            offsets = np.zeros(len(c.ints[path]) + 1, dtype=np.int32)
            np.cumsum(c.ints[path], out=offsets[1:])
            out.append(pa.ListArray.from_arrays(pa.array(offsets), items, type=t, mask=pa.array(null)))
        elif path in c.texts:
            out.append(pa.array(c.texts[path], type=t))
        elif pa.types.is_boolean(t):
            out.append(pa.array(c.ints[path].astype(np.bool_), type=t, mask=null))
        else:
            values = c.floats[path] if path in c.floats else c.ints[path]
            out.append(pa.array(values, type=t, mask=null))
    return out


def _read_json(raws: list[bytes], schema: pa.Schema) -> tuple[pa.StructArray, IntArray] | None:
    """`read` by pyarrow's JSON reader."""
    buf = b'{"e":' + b'}\n{"e":'.join([raw if raw[:1] == b"[" else b"[" + raw + b"]" for raw in raws]) + b"}\n"
    try:
        table = pj.read_json(pa.BufferReader(buf),
                             read_options=pj.ReadOptions(use_threads=False, block_size=len(buf) + 1),
                             parse_options=pj.ParseOptions(explicit_schema=schema,
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


