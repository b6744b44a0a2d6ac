"""Rows straight from parsed JSON for the hot event types: steps, kernel summaries, device samples.

Full contract decoding (`schemas.decode_as`: dataclasses built by walking type hints, then
`sinks.rows`) costs ~50 µs a message; a 10,240-rank job sends three such messages per rank
per second. These functions read the orjson dict directly and build the very same row
tuples in a few µs. They accept only the plain shape of a current-version event and return
None for anything else, unusual-but-valid included (a newer minor version, a null where a
default is allowed, an empty summary): the landing worker then takes the full path, which
lands the event or dead-letters it with its reason. So this is a shortcut, not a second
contract. `tests/sinks/test_fast_rows.py` checks, over generated and mutated events, that
whatever it accepts the full path accepts too, with an identical row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, get_args

from schemas import bounds
from schemas.device import PERCENT_FIELDS
from schemas.identity import DOMAIN_TYPES
from schemas.kernel import CollectiveOp, CopyDirection, KernelCategory
from schemas.kernel_summary import MAX_AGGREGATES_PER_SUMMARY
from schemas.step import Phases
from schemas.version import CONTRACT_MAJOR, CONTRACT_MINOR
from sinks.rows import (
    DEVICE_SAMPLE_COLUMNS,
    DEVICE_SAMPLES_TABLE,
    KERNEL_SUMMARIES_TABLE,
    KERNEL_SUMMARY_COLUMNS,
    NO_GROUP,
    NO_RANK,
    STEP_COLUMNS,
    STEPS_TABLE,
    Row,
    TableRow,
    event_date,
)

Doc = dict[str, Any]
FastMapping = Callable[[Doc, int], list[TableRow] | None]

# Versions decoded strictly by the full path (minor <= ours): unknown fields are errors there,
# so a key outside the sets below can only mean "take the full path".
VERSIONS = frozenset(f"{CONTRACT_MAJOR}.{minor}" for minor in range(CONTRACT_MINOR + 1))
_I64 = bounds.INT64[1]
_U32 = bounds.UINT32[1]
_U16 = bounds.UINT16[1]
_I32 = bounds.INT32[1]
_I16 = bounds.INT16[1]
_ID = bounds.MAX_ID_CHARS
_EMPTY: Doc = {}
_DOMAIN_SLOT = {name: slot for slot, name in enumerate(DOMAIN_TYPES)}
_PHASES = Phases.NAMES
_PHASE_KEYS = frozenset(_PHASES)
_IDENTITY_KEYS = ("type", "v", "job", "rank", "world", "host", "device", "domains")
_STEP_KEYS = frozenset((*_IDENTITY_KEYS, "step", "start_ns", "end_ns", "phases", "gc_count", "batch_size",
                        "samples", "tokens", "flops", "peak_flops", "profiling", "attempt",
                        "mem_peak_bytes", "mem_reserved_bytes", "mem_capacity_bytes"))
_SUMMARY_KEYS = frozenset((*_IDENTITY_KEYS, "step", "entries", "other_count", "other_ns", "dropped", "attempt"))
_AGGREGATE_KEYS = frozenset(("key", "cat", "count", "total_ns", "max_ns", "metric", "shape", "flops", "op", "domain",
                             "group_size", "bytes", "direction", "launch_mean_us", "launch_mad_us"))
_DEVICE_KEYS = frozenset(("type", "v", "host", "device", "ts_ns", "job", "rank", "device_kind", "power_w", "temp_c",
                          *PERCENT_FIELDS, "freq_mhz"))
_CATS = frozenset(get_args(KernelCategory))
_OPS = frozenset(get_args(CollectiveOp))
_DIRECTIONS = frozenset(get_args(CopyDirection))
_DOMAIN_NAMES = frozenset(DOMAIN_TYPES)


class _Reject(Exception):
    """Not the plain shape: take the full path."""


@lru_cache(maxsize=1024)
def _date(day: int) -> Any:
    return event_date(day * 86_400_000_000_000)


def _day(ns: int) -> Any:
    return _date(max(ns, 0) // 86_400_000_000_000)


def _id(value: Any) -> str:
    if type(value) is not str or not 0 < len(value) <= _ID:
        raise _Reject
    return value


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _Reject
    return value


def _opt_int(value: Any, low: int, high: int) -> int | None:
    return None if value is None else _int(value, low, high)


def _opt_num(value: Any, low: float = -math.inf, high: float = math.inf) -> float | None:
    """None, or a finite JSON number in [low, high] as float (the full path's float(value))."""
    if value is None:
        return None
    if type(value) is not float and type(value) is not int:
        raise _Reject
    out = float(value)
    if not (math.isfinite(out) and low <= out <= high):
        raise _Reject
    return out


def _opt_str(value: Any, allowed: frozenset[str] | None = None) -> str | None:
    if value is None:
        return None
    if type(value) is not str or len(value) > _ID or (allowed is not None and value not in allowed):
        raise _Reject
    return value


def _header(doc: Doc, kind: str, keys: frozenset[str]) -> None:
    if doc.get("type") != kind or doc.get("v") not in VERSIONS or not keys.issuperset(doc):
        raise _Reject


def _identity(doc: Doc) -> tuple[str, int, int, str, int, list[int], int]:
    """(job, rank, world, host, device, groups in DOMAIN_TYPES order, pp stage)."""
    world = _int(doc.get("world"), 1, _U32)
    rank = _int(doc.get("rank"), 0, world - 1)
    job = _id(doc.get("job"))
    host = _id(doc.get("host"))
    device = _int(doc.get("device"), 0, _U16)
    domains = doc.get("domains", _EMPTY)
    if type(domains) is not dict:
        raise _Reject
    groups = [NO_GROUP] * len(DOMAIN_TYPES)
    stage = NO_GROUP
    for name, dom in domains.items():
        slot = _DOMAIN_SLOT.get(name)
        if slot is None or type(dom) is not dict or len(dom) != 3:
            raise _Reject
        size = _int(dom.get("size"), 1, world)
        index = _int(dom.get("index"), 0, size - 1)
        groups[slot] = _int(dom.get("group"), 0, _I32)
        if name == "pp":
            stage = _int(index, 0, _I16)
    return job, rank, world, host, device, groups, stage


def _step(doc: Doc, ingested_ns: int) -> list[TableRow]:
    _header(doc, "step", _STEP_KEYS)
    job, rank, world, host, device, groups, stage = _identity(doc)
    step = _int(doc.get("step"), 0, _I64)
    start = _int(doc.get("start_ns"), 1, _I64)
    end = _int(doc.get("end_ns"), start, _I64)
    phases = doc.get("phases", _EMPTY)
    if type(phases) is not dict or not _PHASE_KEYS.issuperset(phases):
        raise _Reject
    profiling = doc.get("profiling", False)
    if type(profiling) is not bool:
        raise _Reject
    row: Row = (
        job, rank, step, world, host, device, *groups, stage, start, end, (end - start) / 1e6,
        *[_opt_num(phases.get(name), 0.0) for name in _PHASES],
        _opt_int(doc.get("gc_count"), 0, _I64), _opt_int(doc.get("batch_size"), 0, _I64),
        _opt_int(doc.get("samples"), 0, _I64), _opt_int(doc.get("tokens"), 0, _I64),
        _opt_num(doc.get("flops"), 0.0), _opt_num(doc.get("peak_flops"), 0.0),
        1 if profiling else 0, _day(start), _int(ingested_ns, 0, _I64), _int(doc.get("attempt", 0), 0, _U16),
        _opt_int(doc.get("mem_peak_bytes"), 0, _I64), _opt_int(doc.get("mem_reserved_bytes"), 0, _I64),
        _opt_int(doc.get("mem_capacity_bytes"), 0, _I64),
    )
    return [TableRow(STEPS_TABLE, STEP_COLUMNS, row)]


def _shape(value: Any) -> tuple[list[str], list[int]]:
    if value is None:
        return [], []
    if type(value) is not dict:
        raise _Reject
    keys = sorted(value)
    for key in keys:
        _id(key)
    return keys, [_int(value[k], -_I64 - 1, _I64) for k in keys]


def _kernel_summary(doc: Doc, ingested_ns: int) -> list[TableRow]:
    _header(doc, "kernel_summary", _SUMMARY_KEYS)
    job, rank, _, host, device, _, _ = _identity(doc)
    step = _int(doc.get("step"), 0, _I64)
    entries = doc.get("entries")
    if type(entries) is not list or not 0 < len(entries) <= MAX_AGGREGATES_PER_SUMMARY:
        raise _Reject  # an empty summary is one special row: the full path makes it
    head = (job, rank, step, host, device)
    tail = (_int(doc.get("other_count", 0), 0, _I64), _int(doc.get("other_ns", 0), 0, _I64),
            _int(doc.get("dropped", 0), 0, _I64), _day(ingested_ns), _int(ingested_ns, 0, _I64),
            _int(doc.get("attempt", 0), 0, _U16))
    n = len(entries)
    out: list[TableRow] = []
    for index, a in enumerate(entries):
        if type(a) is not dict or not _AGGREGATE_KEYS.issuperset(a):
            raise _Reject
        cat = a.get("cat")
        if cat not in _CATS:
            raise _Reject
        op = _opt_str(a.get("op"), _OPS)
        if cat == "comm" and op is None:
            raise _Reject
        total = _int(a.get("total_ns"), 0, _I64)
        max_ns = a.get("max_ns")
        keys, values = _shape(a.get("shape"))
        out.append(TableRow(KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS, (
            *head, index, n, _id(a.get("key")), cat, _int(a.get("count"), 1, _I64), total,
            None if max_ns is None else _int(max_ns, 0, total), _opt_str(a.get("metric")), keys, values,
            _opt_num(a.get("flops"), 0.0), op, _opt_str(a.get("domain"), _DOMAIN_NAMES),
            _opt_int(a.get("group_size"), 1, _U32), _opt_int(a.get("bytes"), 0, _I64),
            _opt_str(a.get("direction"), _DIRECTIONS), _opt_num(a.get("launch_mean_us"), 0.0),
            _opt_num(a.get("launch_mad_us"), 0.0), *tail,
        )))
    return out


def _device(doc: Doc, ingested_ns: int) -> list[TableRow]:
    _header(doc, "device", _DEVICE_KEYS)
    ts = _int(doc.get("ts_ns"), 1, _I64)
    rank = _opt_int(doc.get("rank"), 0, _U32)
    row: Row = (
        _id(doc.get("host")), _int(doc.get("device"), 0, _U16), ts, _opt_str(doc.get("job")) or "",
        NO_RANK if rank is None else rank, _opt_str(doc.get("device_kind")) or "",
        _opt_num(doc.get("power_w"), 0.0), _opt_num(doc.get("temp_c")),
        *[_opt_num(doc.get(name), 0.0, 100.0) for name in PERCENT_FIELDS],
        _opt_num(doc.get("freq_mhz")), _day(ts), _int(ingested_ns, 0, _I64),
    )
    return [TableRow(DEVICE_SAMPLES_TABLE, DEVICE_SAMPLE_COLUMNS, row)]


def _guard(mapping: Callable[[Doc, int], list[TableRow]]) -> FastMapping:
    def fast(doc: Doc, ingested_ns: int) -> list[TableRow] | None:
        try:
            return mapping(doc, ingested_ns)
        except _Reject:
            return None
        except Exception:  # anything unforeseen: the full path decides, with its reason
            return None

    fast.__doc__ = mapping.__doc__
    return fast


FAST_ROWS: dict[str, FastMapping] = {
    "step": _guard(_step),
    "kernel_summary": _guard(_kernel_summary),
    "device": _guard(_device),
}
"""Event type -> fast mapping: the rows of a plain, current-version event, or None (take the full path)."""
