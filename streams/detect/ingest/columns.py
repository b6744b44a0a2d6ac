"""Packed step, kernel-summary and device records to column chunks through msgspec's typed JSON decoder.

Why: the per-event decode (streams/detect/ingest/decode.py) builds an orjson dict per event and checks it
field by field in Python, ~4 µs an event, 4× what a plain consumer pays to parse the same bytes (issue
#25). Here each record is decoded by msgspec into contract structs (every field the contract has for the
type, typed; unknown fields an error), in C and ~2.5× faster than orjson builds dicts, and the checks
detection applies are done on numpy columns taken from the structs. pyarrow's JSON reader, measured for
the same job, parsed slower than orjson (`bench.detect_split`: 3.5 µs a step event against 1.2).

This path only ever returns the chunks the per-event path would return; whenever it cannot be sure of
that it returns None and the caller decodes the batch event by event, which finds and counts the bad
elements alone. msgspec refuses what orjson refuses (invalid JSON or UTF-8, NaN, numbers out of range,
trailing content) and more: a value of another JSON type than the contract's (an int where a float is
due is taken, as the per-event path's `_num` takes it), a `null` where the per-event path reads `null`
unlike a missing field, an unknown field, nesting past its depth, an int outside int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from types import GenericAlias
from typing import Annotated, Any

import msgspec
import numpy as np
import numpy.typing as npt

from schemas.bounds import INT64, UINT16, UINT32
from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.packing import MAX_PACKED_EVENTS
from schemas.step import Phases
from schemas.version import major_ok
from streams.detect.combine.chunks import KERNEL_NUMBERS, KERNEL_STRINGS

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
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
                        ("peak_flops", float | None, None), ("profiling", bool | None, None)])
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
    """A device chunk's column, or a text column of any chunk: a list (device chunks travel as JSON, and their
    signal regroups them value by value)."""
    if isinstance(values, list):
        return list(values) if whole else [values[i] for i in rows.tolist()]
    return list(values.tolist()) if whole else list(values[rows].tolist())


def _column(values: npt.NDArray[Any] | list[Any], rows: IntArray, whole: bool) -> npt.NDArray[Any] | list[Any]:
    """A step or kernel chunk's column: a numeric one stays a numpy array (the chunk codec sends its buffer as it
    is; the per-event path's lists read the same everywhere, `np.asarray`), a text one a list."""
    if isinstance(values, list):
        return _listed(values, rows, whole)
    return np.ascontiguousarray(values if whole else values[rows])


def _identity(events: list[Any], counts: IntArray, record_ids: list[int]
              ) -> tuple[IntArray, IntArray, IntArray, IntArray, list[tuple[tuple[str, int], IntArray]],
                         IntArray, IntArray] | None:
    """(rank, world, step, attempt, the elements grouped by (job, attempt), record index, index in record),
    checked as the per-event path checks them; None: one is out of contract."""
    rank = _ints([e.rank for e in events])
    world = _ints([e.world for e in events])
    step = _ints([e.step for e in events])
    attempt = _ints([e.attempt for e in events])
    jobs = [e.job for e in events]
    if "" in jobs:
        return None
    if not ((rank >= 0) & (rank < world) & (world <= U32) & (step >= 0) & (attempt >= 0) & (attempt <= U16)).all():
        return None
    at, inside = _positions(record_ids, counts)
    return rank, world, step, attempt, _groups(list(zip(jobs, attempt.tolist(), strict=True))), at, inside


def steps(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The step records' chunks (as `decode._add_step` builds them), or None: not sure."""
    got = read("step", raws)
    if got is None:
        return None
    events, counts = got
    ident = _identity(events, counts, record_ids)
    start, end = _ints([e.start_ns for e in events]), _ints([e.end_ns for e in events])
    if ident is None or not ((start > 0) & (start <= end)).all():
        return None
    rank, world, step, _, groups, at, inside = ident
    phases = _nums([_PHASES(e.phases or _NO_PHASES) for e in events]).reshape(len(events), len(Phases.NAMES))
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {
        "rank": rank, "step": step, "host": [e.host for e in events], "start_ns": start, "end_ns": end,
        "samples": _nums([e.samples for e in events]), "batch": _nums([e.batch_size for e in events])}
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
    out: list[Placed] = []
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


def kernel_summaries(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The kernel-summary records' chunks (as `decode._add_kernel_summary` builds them), or None: not sure.

    The numbers are typed strictly here (an int where the per-event path takes only an int; a float where it
    takes any number, which msgspec gives as a float), so each column is the per-event path's."""
    got = read("kernel_summary", raws)
    if got is None:
        return None
    events, counts = got
    ident = _identity(events, counts, record_ids)
    if ident is None:
        return None
    rank, world, step, _, groups, at, inside = ident
    out: list[Placed] = []
    whole = len(groups) == 1
    for (job, att), rows in groups:
        first = int(rows[0])
        mine = events if whole else [events[i] for i in rows.tolist()]
        chunk: dict[str, Any] = {"kind": "kernels", "job": job, "attempt": att, "world": int(world[rows].max()),
                                 "rank": _column(rank, rows, whole), "step": _column(step, rows, whole),
                                 "other_ns": [0 if e.other_ns is None else e.other_ns for e in mine],
                                 "entries": [len(e.entries) for e in mine]}
        fields = list(zip(*[_AGGREGATE(a) for e in mine for a in e.entries], strict=True))
        for i, name in enumerate(_AGGREGATE_FIELDS):
            values = list(fields[i]) if fields else []
            chunk[name] = np.array(values, dtype=np.float64) if name in KERNEL_NUMBERS else values
        out.append(((int(at[first]), int(inside[first])), f"kernels:{attempt_key(job, att)}", chunk))
    return out


def device(record_ids: list[int], raws: list[bytes]) -> list[Placed] | None:
    """The device records' chunks (as `decode._add_device` builds them), or None: not sure."""
    got = read("device", raws)
    if got is None:
        return None
    events, counts = got
    hosts = [e.host for e in events]
    dev, ts = _ints([e.device for e in events]), _ints([e.ts_ns for e in events])
    if "" in hosts or not ((dev >= 0) & (dev <= U16) & (ts > 0)).all():
        return None
    rank = [-1 if e.rank is None else e.rank for e in events]
    metrics = _nums([_METRICS(e) for e in events]).reshape(len(events), len(METRICS))
    cols: dict[str, npt.NDArray[Any] | list[Any]] = {"host": hosts, "device": dev, "rank": rank, "ts_ns": ts}
    for i, m in enumerate(METRICS):
        cols[m] = metrics[:, i]
    at, inside = _positions(record_ids, counts)
    groups = _groups(["" if e.job is None else e.job for e in events])
    whole = len(groups) == 1
    out: list[Placed] = []
    for job, rows in groups:
        first = int(rows[0])
        chunk: dict[str, Any] = {"kind": "device", "job": job}
        for name in ("host", "device", "rank", "ts_ns", *METRICS):
            chunk[name] = _listed(cols[name], rows, whole)
        out.append(((int(at[first]), int(inside[first])), f"device:{job}", chunk))
    return out


DECODERS = {"step": steps, "kernel_summary": kernel_summaries, "device": device}
