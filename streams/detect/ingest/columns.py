"""Packed step, kernel-summary and device records to column chunks: the compiled reader first, msgspec's typed
JSON decoder for the records it declines.

The compiled reader (`schemas/_packed.c`, `schemas.packed_columns`) fills numpy columns as it scans the bytes,
with no Python object per event; the structs' own checks (required fields, no `null` where they take none,
type and version) are then done on its columns (`read_packed`), and the chunks built from them are the
structs' (`tests/streams/detect/ingest/test_decode_columns.py` compares both on every hand-built record).

Why: the per-event decode (streams/detect/ingest/decode.py) builds an orjson dict per event and checks it
field by field in Python, ~4 µs an event, 4× what a plain consumer pays to parse the same bytes (issue
#25). msgspec's structs (every field the contract has for the type, typed; unknown fields an error) are
~2.5× cheaper than orjson's dicts, but building columns from them in Python cost as much again; the compiled
reader skips both. pyarrow's JSON reader, measured for the same job, parsed slower than orjson
(`bench.detect_split`: 3.5 µs a step event against 1.2).

This path only ever returns the chunks the per-event path would return; whenever it cannot be sure of
that it returns None and the caller decodes the batch event by event, which finds and counts the bad
elements alone. msgspec refuses what orjson refuses (invalid JSON or UTF-8, NaN, numbers out of range,
trailing content) and more: a value of another JSON type than the contract's (an int where a float is
due is taken, as the per-event path's `_num` takes it), a `null` where the per-event path reads `null`
unlike a missing field, an unknown field, nesting past its depth, an int outside int64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import GenericAlias
from typing import Annotated, Any, TypeVar, cast

import msgspec
import numpy as np
import numpy.typing as npt

from schemas import packed_columns as packed
from schemas.bounds import INT64, UINT16, UINT32
from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.packing import MAX_PACKED_EVENTS
from schemas.step import Phases
from schemas.version import major_ok
from streams.detect.combine.chunks import KERNEL_NUMBERS, KERNEL_STRINGS, MEMORY_COLUMNS

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")
U32 = UINT32[1]
U16 = UINT16[1]
I64 = INT64[1]
# orjson gives an int outside [-2**63, 2**64) as a float, which the per-event path's int checks refuse;
# msgspec refuses every int outside int64 (a read error: the batch goes event by event)
Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


def _list_of(struct: Any) -> Any:
    """`list[struct]` for a struct made at run time (a value, not a type, to mypy)."""
    return GenericAlias(list, (struct,))


def _struct(name: str, fields: Sequence[tuple[str, Any] | tuple[str, Any, Any]]) -> Any:
    return msgspec.defstruct(name, list(fields), forbid_unknown_fields=True, gc=False)


# a domain of the step's parallel layout; `index` missing reads -1 (the per-event path's `pp.get("index", -1)`),
# `null` None, as there
Domain = _struct("Domain", [("group", Int | None, None), ("size", Int | None, None), ("index", Int | None, -1)])
Domains = _struct("Domains", [(d, Domain | None, None) for d in DOMAIN_TYPES])
_IDENTITY: list[tuple[str, Any] | tuple[str, Any, Any]] = [
    ("type", str), ("v", str), ("job", str), ("rank", Int), ("world", Int), ("host", str, ""),
    ("device", Int | None, None), ("domains", Domains | None, None), ("attempt", Int, 0)]
PhaseTimes = _struct("PhaseTimes", [(p, float | None, None) for p in Phases.NAMES])
Step = _struct("Step", [*_IDENTITY[:5], ("step", Int), ("start_ns", Int), ("end_ns", Int), *_IDENTITY[5:],
                        ("phases", PhaseTimes | None, None), ("gc_count", Int | None, None),
                        ("batch_size", float | None, None), ("samples", float | None, None),
                        ("tokens", Int | None, None), ("flops", float | None, None),
                        ("peak_flops", float | None, None), ("profiling", bool | None, None),
                        ("mem_peak_bytes", Int | None, None), ("mem_reserved_bytes", Int | None, None),
                        ("mem_capacity_bytes", Int | None, None)])
Aggregate = _struct("Aggregate", [
    ("key", str), ("total_ns", Int), ("cat", str | None, None), ("count", Int | None, 0), ("max_ns", Int | None, None),
    ("metric", str | None, None), ("shape", dict[str, Int] | None, None), ("flops", float | None, None),
    ("op", str | None, None), ("domain", str | None, None), ("group_size", Int | None, None),
    ("bytes", Int | None, None), ("direction", str | None, None), ("launch_mean_us", float | None, None),
    ("launch_mad_us", float | None, None)])
KernelSummary = _struct("KernelSummary", [*_IDENTITY[:5], ("step", Int), ("entries", _list_of(Aggregate)),
                                          *_IDENTITY[5:], ("other_count", Int | None, None),
                                          ("other_ns", Int | None, 0), ("dropped", Int | None, None)])
Device = _struct("Device", [("type", str), ("v", str), ("host", str), ("device", Int), ("ts_ns", Int),
                            ("job", str | None, None), ("rank", Int | None, None), ("device_kind", str | None, None),
                            *[(m, float | None, None) for m in METRICS]])
_DECODERS = {kind: (msgspec.json.Decoder(_list_of(struct)), msgspec.json.Decoder(struct))
             for kind, struct in (("step", Step), ("kernel_summary", KernelSummary), ("device", Device))}
_NO_PHASES = PhaseTimes()
_NO_DOMAINS = Domains()
_PHASES = attrgetter(*Phases.NAMES)
_METRICS = attrgetter(*METRICS)
_AGGREGATE_FIELDS = ("key", "total_ns", *KERNEL_STRINGS, *KERNEL_NUMBERS)
_AGGREGATE = attrgetter(*_AGGREGATE_FIELDS)


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


def read(kind: str, raws: list[bytes]) -> tuple[list[Any], IntArray] | None:
    """The records' elements as structs of `kind` (in order), and each record's element count; None: not
    sure (a record msgspec refuses, an empty or oversized array, an element of another type or version)."""
    many, one = _DECODERS[kind]
    events: list[Any] = []
    counts = np.empty(len(raws), dtype=np.int64)
    try:
        for i, raw in enumerate(raws):
            if raw[:1] == b"[":
                got = many.decode(raw)
                if not 0 < len(got) <= MAX_PACKED_EVENTS:
                    return None
                events += got
                counts[i] = len(got)
            else:
                events.append(one.decode(raw))
                counts[i] = 1
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if {e.type for e in events} != {kind} or not all(major_ok(v) for v in {e.v for e in events}):
        return None
    return events, counts


def _ints(values: list[Any]) -> IntArray:
    return np.array(values, dtype=np.int64)  # every `Int` fits


def _nums(values: Sequence[Any]) -> FloatArray:
    """`decode._num` on a column (or rows of columns): the value when >= 0, else (negative, missing) NaN."""
    out = np.array(values, dtype=np.float64)  # None is NaN
    out[~(out >= 0)] = np.nan
    return out


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


def _listed(values: npt.NDArray[Any] | list[Any], rows: IntArray, whole: bool) -> list[Any]:
    """A chunk's column as a list: its text columns, and a kernel chunk's per-summary `other_ns` and `entries`."""
    if isinstance(values, list):
        return list(values) if whole else [values[i] for i in rows.tolist()]
    return list(values.tolist()) if whole else list(values[rows].tolist())


def _column(values: npt.NDArray[Any] | list[Any], rows: IntArray, whole: bool) -> npt.NDArray[Any] | list[Any]:
    """A chunk's column: a numeric one stays a numpy array (the chunk codec sends its buffer as it is; the
    per-event path's lists read the same everywhere, `np.asarray`), a text one a list."""
    if isinstance(values, list):
        return _listed(values, rows, whole)
    return np.ascontiguousarray(values if whole else values[rows])


@dataclass(frozen=True)
class _Identity:
    """The identity columns every step and kernel-summary element has, and where each element stands."""

    rank: IntArray
    world: IntArray
    step: IntArray
    attempt: IntArray
    jobs: list[str]
    counts: IntArray


def _identity_of(events: list[Any], counts: IntArray) -> _Identity:
    return _Identity(_ints([e.rank for e in events]), _ints([e.world for e in events]), _ints([e.step for e in events]),
                     _ints([e.attempt for e in events]), [e.job for e in events], counts)


def _identity_packed(c: packed.Columns) -> _Identity:
    return _Identity(c.ints["rank"], c.ints["world"], c.ints["step"], c.ints["attempt"],
                     cast(list[str], c.texts["job"]), c.counts)


def _checked(ident: _Identity, record_ids: list[int]
             ) -> tuple[list[tuple[tuple[str, int], IntArray]], IntArray, IntArray] | None:
    """(the elements grouped by (job, attempt), record index, index in record), the identity checked as the
    per-event path checks it; None: one is out of contract."""
    rank, world, step, attempt = ident.rank, ident.world, ident.step, ident.attempt
    if "" in ident.jobs:
        return None
    if not ((rank >= 0) & (rank < world) & (world <= U32) & (step >= 0) & (attempt >= 0) & (attempt <= U16)).all():
        return None
    at, inside = _positions(record_ids, ident.counts)
    if attempt.size and len(set(ident.jobs)) == 1 and (attempt == attempt[0]).all():  # one job, one attempt
        return [((ident.jobs[0], int(attempt[0])), np.arange(attempt.size))], at, inside
    return _groups(list(zip(ident.jobs, attempt.tolist(), strict=True))), at, inside


# The contract's fields of each type for the compiled reader, as the structs above have them: what the reader
# accepts has no other field and every value of the struct's type.
_IDENTITY_SPEC = (("type", "s"), ("v", "s"), ("job", "s"), ("rank", "i"), ("world", "i"), ("host", "s"),
                  ("device", "i"), ("domains", "o"), *[(f"domains.{d}", "o") for d in DOMAIN_TYPES],
                  *[(f"domains.{d}.{f}", "i") for d in DOMAIN_TYPES for f in ("group", "size", "index")],
                  ("attempt", "i"), ("step", "i"))
STEP_SPEC = packed.Spec((*_IDENTITY_SPEC, ("start_ns", "i"), ("end_ns", "i"), ("phases", "o"),
                         *[(f"phases.{p}", "f") for p in Phases.NAMES], ("gc_count", "i"), ("batch_size", "f"),
                         ("samples", "f"), ("tokens", "i"), ("flops", "f"), ("peak_flops", "f"), ("profiling", "b"),
                         ("mem_peak_bytes", "i"), ("mem_reserved_bytes", "i"),
                         ("mem_capacity_bytes", "i")))
KERNEL_SUMMARY_SPEC = packed.Spec((
    *_IDENTITY_SPEC, ("entries", "l"), ("entries.key", "s"), ("entries.total_ns", "i"), ("entries.cat", "s"),
    ("entries.count", "i"), ("entries.max_ns", "i"), ("entries.metric", "s"), ("entries.shape", "n"),
    ("entries.flops", "f"), ("entries.op", "s"), ("entries.domain", "s"), ("entries.group_size", "i"),
    ("entries.bytes", "i"), ("entries.direction", "s"), ("entries.launch_mean_us", "f"),
    ("entries.launch_mad_us", "f"), ("other_count", "i"), ("other_ns", "i"), ("dropped", "i")))
DEVICE_SPEC = packed.Spec((("type", "s"), ("v", "s"), ("host", "s"), ("device", "i"), ("ts_ns", "i"), ("job", "s"),
                           ("rank", "i"), ("device_kind", "s"), *[(m, "f") for m in METRICS]))
_SPECS = {"step": STEP_SPEC, "kernel_summary": KERNEL_SUMMARY_SPEC, "device": DEVICE_SPEC}
# fields the structs require (no default) and those they take no `null` for
_REQUIRED = {"step": ("type", "v", "job", "rank", "world", "step", "start_ns", "end_ns"),
             "kernel_summary": ("type", "v", "job", "rank", "world", "step", "entries", "entries.key",
                                "entries.total_ns"),
             "device": ("type", "v", "host", "device", "ts_ns")}
_NOT_NULL = {kind: (*required, *(("host", "attempt") if kind != "device" else ()))
             for kind, required in _REQUIRED.items()}


def read_packed(kind: str, raws: list[bytes]) -> packed.Columns | None:
    """The records' elements of `kind` as columns by the compiled reader, the structs' own checks done on
    them (required fields, no `null` where the struct takes none, the type and the version); None: the
    reader declines or a check fails, and the structs read the records."""
    c = packed.read(raws, _SPECS[kind], MAX_PACKED_EVENTS)
    if c is None:
        return None
    if not all((c.states[f] == packed.VALUE).all() for f in _REQUIRED[kind]):
        return None
    if any((c.states[f] == packed.NULL).any() for f in _NOT_NULL[kind]):
        return None
    if set(c.texts["type"]) != {kind} or not all(major_ok(cast(str, v)) for v in set(c.texts["v"])):
        return None
    return c


def _either(kind: str, raws: list[bytes], of_columns: Callable[[packed.Columns], T],
            of_structs: Callable[[list[Any]], T]) -> tuple[_Identity, T] | None:
    """The records' identity and `kind`'s other columns: from the compiled reader, else from msgspec's structs;
    None: neither vouches for them."""
    fast = read_packed(kind, raws)
    if fast is not None:
        return _identity_packed(fast), of_columns(fast)
    got = read(kind, raws)
    if got is None:
        return None
    events, counts = got
    return _identity_of(events, counts), of_structs(events)


def _valued(c: packed.Columns, path: str, fill: float = np.nan) -> FloatArray:
    """A float (or int) column as float64, `fill` where there is no value (missing or null)."""
    values = c.floats[path] if path in c.floats else c.ints[path].astype(np.float64)
    return np.where(c.states[path] == packed.VALUE, values, fill)


def _step_columns(events: list[Any]) -> tuple[IntArray, IntArray, dict[str, npt.NDArray[Any] | list[Any]]]:
    """(start_ns, end_ns, the other step columns) of structs."""
    phases = _nums([_PHASES(e.phases or _NO_PHASES) for e in events]).reshape(len(events), len(Phases.NAMES))
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {
        "host": [e.host for e in events], "samples": _nums([e.samples for e in events]),
        "batch": _nums([e.batch_size for e in events]), "mem_peak": _nums([e.mem_peak_bytes for e in events]),
        "mem_reserved": _nums([e.mem_reserved_bytes for e in events]),
        "mem_capacity": _nums([e.mem_capacity_bytes for e in events])}
    for i, name in enumerate(Phases.NAMES):
        cols[name] = phases[:, i]
    domains = [e.domains or _NO_DOMAINS for e in events]
    for dom in DOMAIN_TYPES:
        of = [getattr(d, dom) for d in domains]
        pairs = [(-1, 0) if d is None or d.group is None or d.size is None else (d.group, d.size) for d in of]
        if dom == "pp":
            cols["stage"] = [-1 if d is None else d.index for d in of]
        cols[f"g_{dom}"] = [g for g, _ in pairs]
        cols[f"n_{dom}"] = [n for _, n in pairs]
    return _ints([e.start_ns for e in events]), _ints([e.end_ns for e in events]), cols


def _step_columns_packed(c: packed.Columns) -> tuple[IntArray, IntArray, dict[str, npt.NDArray[Any] | list[Any]]]:
    """(start_ns, end_ns, the other step columns) of the compiled reader's columns, on the columns."""
    def nonneg(path: str) -> FloatArray:
        out = _valued(c, path)
        out[~(out >= 0)] = np.nan
        return out

    hosts = c.texts["host"]
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {
        "host": hosts if (c.states["host"] == packed.VALUE).all() else ["" if h is None else h for h in hosts],
        "samples": nonneg("samples"), "batch": nonneg("batch_size"), "mem_peak": nonneg("mem_peak_bytes"),
        "mem_reserved": nonneg("mem_reserved_bytes"), "mem_capacity": nonneg("mem_capacity_bytes")}
    for name in Phases.NAMES:
        cols[name] = nonneg(f"phases.{name}")
    has_domains = c.states["domains"] == packed.VALUE
    for dom in DOMAIN_TYPES:
        at = f"domains.{dom}"
        has = has_domains & (c.states[at] == packed.VALUE)
        pair = has & (c.states[f"{at}.group"] == packed.VALUE) & (c.states[f"{at}.size"] == packed.VALUE)
        cols[f"g_{dom}"] = np.where(pair, c.ints[f"{at}.group"], -1).tolist()
        cols[f"n_{dom}"] = np.where(pair, c.ints[f"{at}.size"], 0).tolist()
        if dom == "pp":  # the index: missing -1 (the struct's default), null None
            state = c.states[f"{at}.index"]
            stage: list[Any] = np.where(has & (state == packed.VALUE), c.ints[f"{at}.index"], -1).tolist()
            for i in np.flatnonzero(has & (state == packed.NULL)).tolist():
                stage[i] = None
            cols["stage"] = stage
    return c.ints["start_ns"], c.ints["end_ns"], cols


def steps(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The step records' chunks (as `decode._add_step` builds them), or None: not sure."""
    got = _either("step", raws, _step_columns_packed, _step_columns)
    if got is None:
        return None
    ident, (start, end, cols) = got
    checked = _checked(ident, record_ids)
    if checked is None or not ((start > 0) & (start <= end)).all():
        return None
    groups, at, inside = checked
    cols.update(rank=ident.rank, step=ident.step, start_ns=start, end_ns=end)
    out: list[Placed] = []
    whole = len(groups) == 1
    for (job, att), rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "steps", "job": job, "attempt": att, "world": int(ident.world[rows].max())}
        for name in ("rank", "step", "host", "start_ns", "end_ns", "samples", "batch", *Phases.NAMES):
            chunk[name] = _column(cols[name], rows, whole)
        for dom in DOMAIN_TYPES:
            chunk[f"g_{dom}"] = _column(cols[f"g_{dom}"], rows, whole)
            chunk[f"n_{dom}"] = _column(cols[f"n_{dom}"], rows, whole)
        chunk["stage"] = _column(cols["stage"], rows, whole)
        memory = {name: _column(cols[name], rows, whole) for name in MEMORY_COLUMNS}
        if not all(np.isnan(v).all() for v in memory.values()):  # as decode._add_step: only with memory
            chunk.update(memory)
        out.append(((int(at[first]), int(inside[first])), f"steps:{attempt_key(job, att)}", chunk))
    return out


def _summary_columns(events: list[Any]) -> tuple[list[int], list[int], dict[str, npt.NDArray[Any] | list[Any]]]:
    """(other_ns per summary, aggregates per summary, the aggregates' columns) of structs."""
    fields = list(zip(*[_AGGREGATE(a) for e in events for a in e.entries], strict=True))
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {}
    for i, name in enumerate(_AGGREGATE_FIELDS):
        values = list(fields[i]) if fields else []
        cols[name] = np.array(values, dtype=np.float64) if name in KERNEL_NUMBERS else values
    return [0 if e.other_ns is None else e.other_ns for e in events], [len(e.entries) for e in events], cols


def _summary_columns_packed(c: packed.Columns
                            ) -> tuple[list[int], list[int], dict[str, npt.NDArray[Any] | list[Any]]]:
    """(other_ns per summary, aggregates per summary, the aggregates' columns) of the compiled reader's columns:
    what the structs give (`count` missing is 0, its default; any other missing or null number NaN)."""
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {"key": c.texts["entries.key"],
                                                     "total_ns": c.ints["entries.total_ns"].tolist()}
    for name in KERNEL_STRINGS:
        cols[name] = c.texts[f"entries.{name}"]
    for name in KERNEL_NUMBERS:
        path = f"entries.{name}"
        values = _valued(c, path)
        if name == "count":
            values[c.states[path] == packed.MISSING] = 0.0
        cols[name] = values
    other = np.where(c.states["other_ns"] == packed.VALUE, c.ints["other_ns"], 0)
    return other.tolist(), c.ints["entries"].tolist(), cols


def kernel_summaries(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The kernel-summary records' chunks (as `decode._add_kernel_summary` builds them), or None: not sure.

    The numbers are typed strictly here (an int where the per-event path takes only an int; a float where it
    takes any number, which msgspec gives as a float), so each column is the per-event path's."""
    got = _either("kernel_summary", raws, _summary_columns_packed, _summary_columns)
    if got is None:
        return None
    ident, (other, entries, cols) = got
    checked = _checked(ident, record_ids)
    if checked is None:
        return None
    groups, at, inside = checked
    whole = len(groups) == 1
    ends = np.cumsum(np.asarray(entries, dtype=np.int64))
    out: list[Placed] = []
    for (job, att), rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "kernels", "job": job, "attempt": att,
                                 "world": int(ident.world[rows].max()), "rank": _column(ident.rank, rows, whole),
                                 "step": _column(ident.step, rows, whole),
                                 "other_ns": _listed(other, rows, whole), "entries": _listed(entries, rows, whole)}
        items = np.arange(ends[-1] if ends.size else 0) if whole else np.concatenate(
            [np.arange(ends[r] - entries[r], ends[r]) for r in rows.tolist()] or [np.arange(0)])
        for name in _AGGREGATE_FIELDS:
            values = cols[name]
            chunk[name] = (np.array(values[items], dtype=np.float64) if isinstance(values, np.ndarray)
                           else _listed(values, items, whole))
        out.append(((int(at[first]), int(inside[first])), f"kernels:{attempt_key(job, att)}", chunk))
    return out


def _device_columns(events: list[Any]) -> tuple[list[Any], IntArray, IntArray, IntArray, FloatArray, list[str]]:
    """(host, device, ts_ns, rank, metrics (a row an element), job) of structs."""
    return ([e.host for e in events], _ints([e.device for e in events]), _ints([e.ts_ns for e in events]),
            _ints([-1 if e.rank is None else e.rank for e in events]),
            _nums([_METRICS(e) for e in events]).reshape(len(events), len(METRICS)),
            ["" if e.job is None else e.job for e in events])


def _device_columns_packed(c: packed.Columns
                           ) -> tuple[list[Any], IntArray, IntArray, IntArray | list[Any], FloatArray, list[str]]:
    """(host, device, ts_ns, rank, metrics (a row an element), job) of the compiled reader's columns."""
    metrics = np.column_stack([_valued(c, m) for m in METRICS]) if METRICS else np.empty((c.counts.sum(), 0))
    metrics[~(metrics >= 0)] = np.nan
    rank = np.where(c.states["rank"] == packed.VALUE, c.ints["rank"], -1)
    jobs = c.texts["job"]
    return (c.texts["host"], c.ints["device"], c.ints["ts_ns"], rank, metrics,
            ["" if j is None else j for j in jobs] if None in jobs else cast(list[str], jobs))


def device(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The device records' chunks (as `decode._add_device` builds them), or None: not sure."""
    fast = read_packed("device", raws)
    if fast is not None:
        hosts, dev, ts, rank, metrics, jobs = _device_columns_packed(fast)
        kinds: list[Any] = list(fast.texts["device_kind"])
        counts = fast.counts
    else:
        got = read("device", raws)
        if got is None:
            return None
        events, counts = got
        hosts, dev, ts, rank, metrics, jobs = _device_columns(events)
        kinds = [e.device_kind for e in events]
    if "" in hosts or not ((dev >= 0) & (dev <= U16) & (ts > 0)).all():
        return None
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {"host": hosts, "device": dev, "rank": rank, "ts_ns": ts}
    for i, m in enumerate(METRICS):
        cols[m] = metrics[:, i]
    at, inside = _positions(record_ids, counts)
    groups = _groups(jobs)
    whole = len(groups) == 1
    out: list[Placed] = []
    for job, rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "device", "job": job}
        for name in ("host", "device", "rank", "ts_ns", *METRICS):
            chunk[name] = _column(cols[name], rows, whole)
        kind = next((kinds[i] for i in rows.tolist() if kinds[i]), None)  # the job's devices' kind (issue #44)
        if kind:
            chunk["device_kind"] = kind
        out.append(((int(at[first]), int(inside[first])), f"device:{job}", chunk))
    return out


DECODERS = {"step": steps, "kernel_summary": kernel_summaries, "device": device}
