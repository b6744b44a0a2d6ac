"""PyTorch Kineto traces (.json / .json.gz): the pre-2024 layout and the 2024 one.

The 2024 layout adds `distributedInfo.pg_config` and NCCL collective args on the kernel
(`Collective name`, `In msg nelems`, `dtype`, `Process Group Name`/`Ranks`); older traces
only have the kernel name, from which the collective is read (`ncclKernel_AllReduce_RING_LL_Sum_float`
and, from NCCL 2.19, `ncclDevKernel_AllGather_RING_LL`). Launch latency pairs a runtime call
and its kernel by `args.correlation` (what the `ac2g` flow arrows connect). Events stream
through `EventStream`; only numeric columns are kept.
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from streams.profiles.jsonstream import EventStream
from streams.profiles.model import (
    NCCL_KERNEL,
    Collective,
    ColumnBuilder,
    HostOps,
    Kernels,
    Names,
    Profile,
    Step,
    kernel_kind,
    pipeline_stage,
)

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NCCL_OP = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "double": 8, "float64": 8, "long": 8,
    "int64": 8, "uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "bf16": 2, "char": 1, "byte": 1,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
PARALLEL_BYTES = 64 << 20
_DEVICE_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
_RUNTIME_CATS = frozenset(("cuda_runtime", "cuda_driver", "runtime", "driver"))
_HOST_CATS = frozenset(("cpu_op", "user_annotation", "python_function", "operator"))


def nccl_op(name: str) -> str | None:
    """Collective of an NCCL kernel name, lower case (`allreduce`), for old and new kernel names."""
    match = _NCCL_OP.match(name)
    return match.group(1).lower() if match else None


def _msg_bytes(args: dict[str, Any]) -> float:
    nelems = args.get("In msg nelems")
    if nelems is None:
        return math.nan
    size = _DTYPE_BYTES.get(str(args.get("dtype", "")).lower(), 0)
    return float(nelems) * size if size else math.nan


@dataclass(slots=True)
class _Part:
    """Columns of one run of events with its own name table (picklable: crosses the process pool)."""

    names: list[str]
    kernels: dict[str, npt.NDArray[Any]]
    runtime: dict[str, npt.NDArray[Any]]
    ops: dict[str, npt.NDArray[Any]]
    steps: list[Step]
    collectives: list[Collective]  # seq assigned when parts are merged, in file order
    events: int


def _collect(batch: list[dict[str, Any]]) -> _Part:
    names = Names()
    kernels = ColumnBuilder(ts="f8", dur="f8", kind="i1", stream="i4", name="i4", corr="i8")
    runtime = ColumnBuilder(ts="f8", dur="f8", name="i4", tid="i8", corr="i8")
    ops = ColumnBuilder(ts="f8", dur="f8", name="i4", tid="i8", corr="i8")
    steps: list[Step] = []
    collectives: list[Collective] = []
    kind_cache: dict[int, int] = {}
    k_ts, k_dur, k_kind, k_stream, k_name, k_corr = (kernels.lists[c] for c in kernels.dtypes)
    r_ts, r_dur, r_name, r_tid, r_corr = (runtime.lists[c] for c in runtime.dtypes)
    o_ts, o_dur, o_name, o_tid, o_corr = (ops.lists[c] for c in ops.dtypes)
    intern = names.id
    index = names.index
    device_cats, runtime_cats, host_cats = _DEVICE_CATS, _RUNTIME_CATS, _HOST_CATS
    # the hot loop of the importer: values are appended as orjson gives them (numpy converts per
    # batch); no per-event float()/int() calls, names looked up in the interning dict directly
    for ev in batch:
        cat = ev.get("cat")
        if cat in device_cats:
            if ev.get("ph") != "X":
                continue
            args = ev.get("args") or {}
            name = ev.get("name", "")
            nid = index.get(name)
            if nid is None:
                nid = intern(name)
            kind = kind_cache.get(nid)
            if kind is None:
                kind = kind_cache[nid] = kernel_kind(name)
            ts = ev["ts"]
            dur = ev.get("dur", 0.0)
            k_ts.append(ts)
            k_dur.append(dur)
            k_kind.append(kind)
            k_stream.append(args.get("stream", -1))
            k_name.append(nid)
            k_corr.append(args.get("correlation", -1))
            if kind == 1:
                group = str(args.get("Process Group Name", args.get("Process Group Description", "default")))
                op = str(args.get("Collective name") or nccl_op(name) or "unknown").lower()
                collectives.append(Collective(name=name, op=op, ts=float(ts), dur=float(dur),
                                              bytes=_msg_bytes(args), group=group, seq=-1))
        elif cat in runtime_cats:
            if ev.get("ph") != "X":
                continue
            name = ev.get("name", "")
            nid = index.get(name)
            if nid is None:
                nid = intern(name)
            r_ts.append(ev["ts"])
            r_dur.append(ev.get("dur", 0.0))
            r_name.append(nid)
            r_tid.append(ev.get("tid", 0))
            r_corr.append((ev.get("args") or {}).get("correlation", -1))
        elif cat in host_cats:
            if ev.get("ph") != "X":
                continue
            name = ev.get("name", "")
            ts = ev["ts"]
            dur = ev.get("dur", 0.0)
            if name.startswith("ProfilerStep#"):
                match = _STEP.match(name)
                if match:
                    steps.append(Step(int(match.group(1)), float(ts), float(dur)))
            nid = index.get(name)
            if nid is None:
                nid = intern(name)
            o_ts.append(ts)
            o_dur.append(dur)
            o_name.append(nid)
            o_tid.append(ev.get("tid", 0))
            o_corr.append(-1)
    for column in (k_stream, r_tid, o_tid):  # a few traces write thread ids as strings
        if column and not all(isinstance(v, int) for v in column):
            column[:] = [v if isinstance(v, int) else -1 for v in column]
    return _Part(names.items, kernels.build(), runtime.build(), ops.build(), steps, collectives, len(batch))


def _collect_slice(raw: bytes) -> _Part | None:
    """Pool side: parse one slice of whole events; None if the cut was not an event boundary."""
    try:
        batch = orjson.loads(b"[" + raw + b"]")
    except orjson.JSONDecodeError:
        return None
    return _collect(batch)


def _merge(parts: list[_Part]) -> tuple[Names, dict[str, npt.NDArray[Any]], dict[str, npt.NDArray[Any]],
                                       dict[str, npt.NDArray[Any]], list[Step], list[Collective]]:
    names = Names()
    tables: dict[str, list[dict[str, npt.NDArray[Any]]]] = {"kernels": [], "runtime": [], "ops": []}
    steps: list[Step] = []
    collectives: list[Collective] = []
    seq: dict[str, int] = {}
    for part in parts:
        remap = np.array([names.id(n) for n in part.names] or [0], dtype=np.int32)
        for key in tables:
            cols = dict(getattr(part, key))
            cols["name"] = remap[cols["name"]] if cols["name"].size else cols["name"]
            tables[key].append(cols)
        steps.extend(part.steps)
        for c in part.collectives:
            n = seq.get(c.group, 0)
            seq[c.group] = n + 1
            collectives.append(Collective(c.name, c.op, c.ts, c.dur, c.bytes, c.group, n))
    merged = {key: {col: np.concatenate([t[col] for t in parts_]) if parts_ else np.zeros(0)
                    for col in (parts_[0] if parts_ else {})} for key, parts_ in tables.items()}
    return names, merged["kernels"], merged["runtime"], merged["ops"], steps, collectives


def _parts_parallel(stream: EventStream, workers: int) -> list[_Part] | None:
    """Slices cut in this process, parsed by `workers` processes; None when a cut was not a boundary."""
    parts: list[_Part] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[_Part | None] | _Part] = deque()  # in file order
        for raw in stream.raw_slices():
            if isinstance(raw, list):  # the end of the array, already parsed here
                pending.append(_collect(raw))
            else:
                pending.append(pool.submit(_collect_slice, raw))
            while len(pending) > 2 * workers or (not isinstance(raw, bytes) and pending):
                head = pending.popleft()  # bounded memory: at most 2 slices queued per worker
                part = head if isinstance(head, _Part) else head.result()
                if part is None:
                    return None
                parts.append(part)
        while pending:
            head = pending.popleft()
            part = head if isinstance(head, _Part) else head.result()
            if part is None:
                return None
            parts.append(part)
    return parts


def parse_kineto(path: Path, progress: Callable[[int], None] | None = None, workers: int | None = None,
                 parallel_bytes: int = PARALLEL_BYTES) -> Profile:
    """Parse a Kineto trace. `workers` > 1 parses slices in that many processes (files ≥ PARALLEL_BYTES);
    default: up to 4, one per core."""
    size = path.stat().st_size
    n = workers if workers is not None else min(4, os.cpu_count() or 1)
    parts: list[_Part] | None = None
    stream = EventStream(path, progress=progress)
    if n > 1 and size >= parallel_bytes:
        parts = _parts_parallel(stream, n)
        if parts is None:  # an unusual trace the fast cut cannot split: read it again, validating each cut
            stream = EventStream(path, progress=progress)
    if parts is None:
        parts = [_collect(batch) for batch in stream.batches()]
    names, k, r, o, steps, collectives = _merge(parts)
    header = stream.header
    dist = header.get("distributedInfo") or {}
    base_us = float(header.get("baseTimeNanoseconds", 0)) / 1000.0
    groups: dict[str, list[int]] = {}
    described: list[tuple[str, list[int]]] = []
    for pg in dist.get("pg_config") or []:
        if isinstance(pg, dict):
            groups[str(pg.get("pg_name"))] = [int(x) for x in pg.get("ranks") or []]
            described.append((str(pg.get("pg_desc", "")), groups[str(pg.get("pg_name"))]))
    rank = int(dist["rank"]) if "rank" in dist else None
    devices = header.get("deviceProperties") or []
    profile = Profile(
        source=str(path),
        format="kineto",
        rank=rank,
        world=int(dist["world_size"]) if "world_size" in dist else None,
        device=str(devices[0].get("name")) if devices and isinstance(devices[0], dict) else None,
        names=names,
        kernels=Kernels(k["ts"], k["dur"], k["kind"], k["stream"], k["name"], k["corr"]),
        runtime=HostOps(r["ts"], r["dur"], r["name"], r["tid"], r["corr"]),
        ops=HostOps(o["ts"], o["dur"], o["name"], o["tid"], o["corr"]),
        steps=sorted(steps, key=lambda s: s.ts),
        collectives=collectives,
        groups=groups,
        stage=pipeline_stage(rank, described),
        bytes_read=path.stat().st_size,
        events=sum(part.events for part in parts),
        # time stamps stay on the trace's clock: adding baseTimeNanoseconds (~1.7e15 µs) in float64
        # would round ns-resolution times to 0.25 µs; base_us is kept for cross-trace alignment
        meta={"schemaVersion": header.get("schemaVersion"), "backend": dist.get("backend"), "base_us": base_us},
    )
    return profile


def is_nccl(name: str) -> bool:
    return NCCL_KERNEL.match(name) is not None


__all__ = ["is_nccl", "nccl_op", "np", "parse_kineto"]
