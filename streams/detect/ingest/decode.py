"""Decode a batch of raw messages straight into per-job column chunks (orjson, no dataclasses).

Full contract decoding costs ~50 µs an event; detection needs only a few fields, so this
module reads them from the orjson dict and applies the contract's cheap checks on them (type,
version by the contract's own pattern, identity and time fields within their column ranges,
non-negative times). Bad input is counted and skipped, never raised: the landing worker is the
one that dead-letters it with its reason. An event the contract rejects for one of those fields
must never reach the engine (a forged rank's steps at `end_ns` 2^64-1 or version "1.²" once
made phantom HUNG_RANK incidents in `make chaos`); the test pins this against schemas.decode. A record may
pack an array of events (contract 1.2): its elements go to the same columns one by one, a
bad element is skipped alone.

A chunk is a plain dict of lists (one list per column) for one job, ready to be sent
as one message on the internal partials topic keyed by job; its keys per kind are the
TypedDicts of streams/detect/combine/chunks.py. The builders here write columns by name
(phases, domains, metrics) on plain dicts; what `decode_batch` returns is typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, cast

import orjson

from schemas.bounds import INT64, UINT16, UINT32
from schemas.columns import DEVICE_METRICS, DOMAINS, PHASES
from schemas.decoding import decode_object
from schemas.errors import ContractError
from schemas.job import ModelShape
from schemas.packing import MAX_PACKED_EVENTS
from schemas.version import major_ok, parse_version
from streams.detect.combine.chunks import KERNEL_NUMBERS, KERNEL_STRINGS, MEMORY_COLUMNS, Chunk
from streams.detect.ingest import columns
from streams.detect.ingest.columns import attempt_key

NAN = math.nan
I64 = INT64[1]  # steps, times: Int64 columns
U32 = UINT32[1]  # rank, world
U16 = UINT16[1]  # device


@dataclass(slots=True)
class DecodeStats:
    """Counters of one decode call (added into the worker's metrics)."""

    events: int = 0
    bad: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    declined: bool = False  # the columnar path was tried and handed the batch back (decoded event by event)


def _major_ok(doc: dict[str, Any]) -> bool:
    return major_ok(doc.get("v"))


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value >= 0 else NAN


def _attempt(doc: dict[str, Any]) -> int | None:
    """The event's attempt (contract 1.4; 0 when absent, a 1.3 producer), None when out of contract."""
    attempt = doc.get("attempt", 0)
    return attempt if type(attempt) is int and 0 <= attempt <= U16 else None


def _new_step_chunk(job: str, attempt: int) -> dict[str, Any]:
    chunk: dict[str, Any] = {"kind": "steps", "job": job, "attempt": attempt, "world": 0, "rank": [], "step": [],
                             "host": [], "start_ns": [], "end_ns": [], "samples": [], "batch": []}
    for name in PHASES:
        chunk[name] = []
    for dom in DOMAINS:
        chunk[f"g_{dom}"] = []
        chunk[f"n_{dom}"] = []
    chunk["stage"] = []
    return chunk


def _add_step(chunks: dict[str, dict[str, Any]], doc: dict[str, Any]) -> bool:
    job = doc.get("job")
    rank = doc.get("rank")
    world = doc.get("world")
    step = doc.get("step")
    start = doc.get("start_ns")
    end = doc.get("end_ns")
    if not (isinstance(job, str) and job and isinstance(rank, int) and isinstance(world, int)
            and 0 <= rank < world <= U32 and isinstance(step, int) and 0 <= step <= I64
            and isinstance(start, int) and isinstance(end, int) and 0 < start <= end <= I64):
        return False
    phases = doc.get("phases") or {}
    domains = doc.get("domains") or {}
    attempt = _attempt(doc)
    if not isinstance(phases, dict) or not isinstance(domains, dict) or attempt is None:
        return False
    key = f"steps:{attempt_key(job, attempt)}"
    chunk = chunks.get(key)
    if chunk is None:
        chunk = chunks[key] = _new_step_chunk(job, attempt)
    chunk["world"] = max(chunk["world"], world)
    chunk["rank"].append(rank)
    chunk["step"].append(step)
    chunk["host"].append(str(doc.get("host", "")))
    chunk["start_ns"].append(start)
    chunk["end_ns"].append(end)
    chunk["samples"].append(_num(doc.get("samples")))
    chunk["batch"].append(_num(doc.get("batch_size")))
    for name in PHASES:
        chunk[name].append(_num(phases.get(name)))
    for dom in DOMAINS:
        d = domains.get(dom)
        if isinstance(d, dict) and isinstance(d.get("group"), int) and isinstance(d.get("size"), int):
            chunk[f"g_{dom}"].append(d["group"])
            chunk[f"n_{dom}"].append(d["size"])
        else:
            chunk[f"g_{dom}"].append(-1)
            chunk[f"n_{dom}"].append(0)
    pp = domains.get("pp")
    chunk["stage"].append(pp.get("index", -1) if isinstance(pp, dict) else -1)
    memory = [_bytes(doc.get(f"{name}_bytes")) for name in MEMORY_COLUMNS]
    if "mem_peak" in chunk:
        for name, value in zip(MEMORY_COLUMNS, memory, strict=True):
            chunk[name].append(value)
    elif any(v == v for v in memory):  # the chunk's first row with memory: the rows before had none
        before = [NAN] * (len(chunk["rank"]) - 1)
        for name, value in zip(MEMORY_COLUMNS, memory, strict=True):
            chunk[name] = [*before, value]
    return True


def _bytes(value: Any) -> float:
    """A step's memory statistic (contract 1.5) as a chunk value: bytes, NaN when absent or out of contract.
    A chunk has the memory columns only when one of its rows has a value (most jobs send none: no NaN
    columns on the partials topic for them)."""
    return float(value) if type(value) is int and value >= 0 else NAN


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else NAN


def _integer(value: Any) -> float:
    return float(value) if isinstance(value, int) else NAN


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def new_kernel_chunk(job: str, attempt: int, world: int) -> dict[str, Any]:
    chunk: dict[str, Any] = {"kind": "kernels", "job": job, "attempt": attempt, "world": world}
    for name in ("rank", "step", "other_ns", "entries", "key", "total_ns", *KERNEL_STRINGS, *KERNEL_NUMBERS):
        chunk[name] = []
    return chunk


def _add_kernel_summary(chunks: dict[str, dict[str, Any]], doc: dict[str, Any]) -> bool:
    """A summary's aggregates as columns of what R4–R9 read (streams/detect/combine/chunks.py `KernelChunk`)."""
    job = doc.get("job")
    rank = doc.get("rank")
    world = doc.get("world")
    step = doc.get("step")
    entries = doc.get("entries")
    if not (isinstance(job, str) and job and isinstance(rank, int) and isinstance(world, int)
            and 0 <= rank < world <= U32 and isinstance(step, int) and 0 <= step <= I64 and isinstance(entries, list)):
        return False
    attempt = _attempt(doc)
    if attempt is None:
        return False
    key = f"kernels:{attempt_key(job, attempt)}"
    chunk = chunks.get(key)
    if chunk is None:
        chunk = chunks[key] = new_kernel_chunk(job, attempt, world)
    chunk["world"] = max(chunk["world"], world)
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not isinstance(e.get("total_ns"), int):
            return False
    add_summary(chunk, rank, step, doc.get("other_ns", 0), entries)
    return True


def add_summary(chunk: dict[str, Any], rank: int, step: int, other_ns: Any, entries: list[dict[str, Any]]) -> None:
    """One summary into a kernel chunk's columns (its aggregates checked: each has a str key and an int total)."""
    chunk["rank"].append(rank)
    chunk["step"].append(step)
    chunk["other_ns"].append(int(other_ns) if isinstance(other_ns, int) else 0)
    chunk["entries"].append(len(entries))
    for e in entries:
        chunk["key"].append(e["key"])
        chunk["total_ns"].append(int(e["total_ns"]))
        chunk["cat"].append(_name(e.get("cat")))
        chunk["domain"].append(_name(e.get("domain")))
        chunk["direction"].append(_name(e.get("direction")))
        chunk["count"].append(_integer(e.get("count", 0)))
        chunk["flops"].append(_number(e.get("flops")))
        chunk["bytes"].append(_integer(e.get("bytes")))
        chunk["launch_mean_us"].append(_number(e.get("launch_mean_us")))
        chunk["launch_mad_us"].append(_number(e.get("launch_mad_us")))
        chunk["max_ns"].append(_integer(e.get("max_ns")))


def _add_device(chunks: dict[str, dict[str, Any]], doc: dict[str, Any]) -> bool:
    host = doc.get("host")
    device = doc.get("device")
    ts = doc.get("ts_ns")
    if not (isinstance(host, str) and host and isinstance(device, int) and 0 <= device <= U16
            and isinstance(ts, int) and 0 < ts <= I64):
        return False
    job = doc.get("job") if isinstance(doc.get("job"), str) else ""
    chunk = chunks.get(f"device:{job}")
    if chunk is None:
        chunk = chunks[f"device:{job}"] = {"kind": "device", "job": job, "host": [], "device": [], "rank": [],
                                           "ts_ns": [], **{m: [] for m in DEVICE_METRICS}}
    chunk["host"].append(host)
    chunk["device"].append(device)
    rank = doc.get("rank")
    chunk["rank"].append(rank if isinstance(rank, int) else -1)
    chunk["ts_ns"].append(ts)
    for m in DEVICE_METRICS:
        chunk[m].append(_num(doc.get(m)))
    kind = doc.get("device_kind")
    if isinstance(kind, str) and kind and "device_kind" not in chunk:
        chunk["device_kind"] = kind  # the job's devices' kind: what the fleet's benchmarks are per (issue #44)
    return True


def _add_job(chunks: dict[str, dict[str, Any]], doc: dict[str, Any]) -> bool:
    job = doc.get("job")
    phase = doc.get("phase")
    world = doc.get("world")
    last = doc.get("last_step")
    ts = doc.get("ts_ns")
    if not (isinstance(job, str) and job and phase in ("start", "end") and isinstance(world, int)
            and 1 <= world <= U32 and isinstance(ts, int) and 0 <= ts <= I64
            and (last is None or (isinstance(last, int) and 0 <= last <= I64))):
        return False
    attempt = _attempt(doc)
    shape = _model_shape(doc)
    if attempt is None or shape is False:
        return False
    chunk: dict[str, Any] = {
        "kind": "job", "job": job, "attempt": attempt, "phase": phase, "world": world, "ts_ns": ts, "last_step": last,
        "parallel": doc.get("parallel") or {}, "kernel_summaries": doc.get("kernel_summaries") is True}
    if shape is not None:
        chunk["model_shape"] = shape
    chunks[f"job:{phase}:{attempt_key(job, attempt)}"] = chunk
    return True


def _model_shape(doc: dict[str, Any]) -> dict[str, Any] | bool | None:
    """The start event's model shape (contract 1.5) as its known fields, checked as the contract checks it
    (a job event is rare: the full check costs nothing); None: none; False: out of contract (the event is bad,
    as landing dead-letters it)."""
    value = doc.get("model_shape")
    if value is None:
        return None
    if type(value) is not dict:
        return False
    try:
        version = parse_version(doc.get("v"))
        return decode_object(ModelShape, value, strict=not version.is_newer_minor, path="model_shape").known()
    except ContractError:
        return False


_HANDLERS = {"step": _add_step, "kernel_summary": _add_kernel_summary, "device": _add_device, "job": _add_job}
_PACKED_HANDLERS = {kind: handler for kind, handler in _HANDLERS.items() if kind != "job"}


def decode_batch(raws: list[bytes], max_event_bytes: int, columnar: bool = True
                 ) -> tuple[list[Chunk], DecodeStats]:
    """Decode raw messages of any detect input topic into chunks (one per job and kind).

    `columnar`: step, kernel-summary and device records are decoded by msgspec's typed decoder and checked on
    columns (streams/detect/ingest/columns.py) when the whole batch allows it; the chunks are the same either way."""
    if columnar:
        fast = _decode_columnar(raws, max_event_bytes)
        if fast is not None:
            return fast
    stats = DecodeStats(declined=columnar)
    chunks: dict[str, dict[str, Any]] = {}
    for raw in raws:
        _decode_record(raw, max_event_bytes, chunks, stats)
    # step chunks keep a key "job" even for device chunks without one ("" = not attributed).
    # A batch mixes topics, so a job's `end` may precede its last steps here: job starts go
    # first and job ends last, so the engine sees every step of the batch before the end.
    return cast(list[Chunk], sorted(chunks.values(), key=_chunk_order)), stats


def _decode_columnar(raws: list[bytes], max_event_bytes: int) -> tuple[list[Chunk], DecodeStats] | None:
    """The batch's step and device records read to columns, the rest event by event; None: the caller
    decodes the whole batch event by event (a record the columns cannot vouch for).

    The chunks come out in the per-event path's order: each chunk placed where its first element
    stands in the batch (what the per-event path's dict insertion order is), then `_chunk_order`."""
    stats = DecodeStats()
    chunks: dict[str, dict[str, Any]] = {}
    placed: list[tuple[tuple[int, int], str]] = []
    fast: dict[str, tuple[list[int], list[bytes]]] = {}
    for i, raw in enumerate(raws):
        kind = columns.sniff(raw) if type(raw) is bytes and len(raw) <= max_event_bytes else None
        if kind is not None and kind in columns.DECODERS:
            ids, records = fast.setdefault(kind, ([], []))
            ids.append(i)
            records.append(raw)
            continue
        before = len(chunks)
        _decode_record(raw, max_event_bytes, chunks, stats)
        placed.extend(((i, k), key) for k, key in enumerate(islice(chunks, before, None)))
    by_key: dict[str, dict[str, Any]] = {}
    for kind, (ids, records) in fast.items():
        decoded = columns.DECODERS[kind](ids, records)
        if decoded is None:
            return None
        for position, key, chunk in decoded:
            if key in chunks or key in by_key:
                return None  # rows of one chunk from both paths: their order is the per-event path's to keep
            by_key[key] = chunk
            placed.append((position, key))
            n = len(chunk["rank"])
            stats.events += n
            stats.by_type[kind] = stats.by_type.get(kind, 0) + n
    placed.sort()
    ordered = [by_key[key] if key in by_key else chunks[key] for _, key in placed]
    return cast(list[Chunk], sorted(ordered, key=_chunk_order)), stats


def _decode_record(raw: bytes, max_event_bytes: int, chunks: dict[str, dict[str, Any]], stats: DecodeStats) -> None:
    """One raw message's events into `chunks`, event by event; bad ones counted in `stats`."""
    if raw is None or len(raw) > max_event_bytes:
        stats.events += 1
        stats.bad += 1
        return
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        stats.events += 1
        stats.bad += 1
        return
    # contract 1.2: a record is one event or an array of 1..MAX_PACKED_EVENTS events
    if type(doc) is list:
        if not 0 < len(doc) <= MAX_PACKED_EVENTS:
            stats.events += 1
            stats.bad += 1
            return
        docs: list[Any] = doc
        handlers = _PACKED_HANDLERS  # `jobs` records are one object each (landing dead-letters an array)
    else:
        docs = [doc]
        handlers = _HANDLERS
    stats.events += len(docs)
    by_type = stats.by_type
    for doc in docs:
        if type(doc) is not dict or not _major_ok(doc):
            stats.bad += 1
            continue
        kind = doc.get("type")
        if type(kind) is not str:
            stats.bad += 1
            continue
        handler = handlers.get(kind)
        if handler is not None and handler(chunks, doc):
            by_type[kind] = by_type.get(kind, 0) + 1
        else:
            stats.bad += 1


def _chunk_order(chunk: dict[str, Any]) -> tuple[int, int]:
    """Attempts in order (an earlier attempt's last reports, then the relaunch's), and within one
    attempt its start first and its end last."""
    attempt = chunk.get("attempt", 0)
    order = attempt if isinstance(attempt, int) else 0
    if chunk.get("kind") != "job":
        return order, 1
    return order, 2 if chunk.get("phase") == "end" else 0
