"""torch_npu profiler output (`*_ascend_pt/`), levels 0-2.

Reads, when present: `ASCEND_PROFILER_OUTPUT/trace_view.json` (a bare array; `ts` is a string),
`kernel_details.csv` (device tasks; `Start Time(us)` ends with a tab), `step_trace_time.csv`
(torch_npu's own per-step breakdown, kept as the reference), `communication.json`
(per-collective timing and per-link transfer sizes) and the rank id from `profiler_info_*.json`.
Columns are looked up by name and unknown ones ignored: level 2 adds fields to level 1.

Device time: compute = the kernel_details tasks that are not HCCL; communication = the ops on
HCCL's `Group * Communication` threads; this is how torch_npu's Overlap Analysis counts them.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from streams.profiles.jsonstream import EventStream, TraceFormatError
from streams.profiles.model import (
    COMMUNICATION,
    COMPUTE,
    Collective,
    ColumnBuilder,
    HostOps,
    Kernels,
    Names,
    Profile,
    ReferenceStep,
    Step,
    pipeline_stage,
)

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_HCOM_OP = re.compile(r"^hcom_([A-Za-z]+)_")
_NON_COMPUTE_CORES = frozenset(("HCCL", "COMMUNICATION"))


def is_ascend_dir(path: Path) -> bool:
    return path.is_dir() and ((path / OUTPUT_DIR).is_dir() or any(path.glob("profiler_info*.json")))


def _float(value: Any) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        return math.nan


def _read_csv(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for row in reader:
            yield {h: v.strip() for h, v in zip(header, row, strict=False)}


def _rank_id(root: Path) -> int | None:
    for info in sorted(root.glob("profiler_info*.json")):
        data = orjson.loads(info.read_bytes())
        if isinstance(data, dict) and "rank_id" in data:
            return int(data["rank_id"])
        match = re.search(r"profiler_info_(\d+)\.json$", info.name)
        if match:
            return int(match.group(1))
    return None


def _parallel_groups(root: Path) -> list[tuple[str, list[int]]]:
    """torch_npu's `parallel_group_info` (profiler_metadata.json): HCCL comm name -> group_name, global_ranks."""
    meta = root / "profiler_metadata.json"
    if not meta.is_file():
        return []
    data = orjson.loads(meta.read_bytes())
    info = data.get("parallel_group_info") or {} if isinstance(data, dict) else {}
    if isinstance(info, str):  # some versions store it as a JSON string
        info = orjson.loads(info)
    return [(str(g.get("group_name", "")), [int(r) for r in g.get("global_ranks") or []])
            for g in info.values() if isinstance(g, dict)] if isinstance(info, dict) else []


def parse_ascend(root: Path, progress: Callable[[int], None] | None = None) -> Profile:
    out = root / OUTPUT_DIR
    if not out.is_dir():
        raise TraceFormatError(f"{root}: no {OUTPUT_DIR} directory (was the profile analysed by torch_npu?)")
    names = Names()
    kern = ColumnBuilder(ts="f8", dur="f8", kind="i1", stream="i4", name="i4", corr="i8")
    ops = ColumnBuilder(ts="f8", dur="f8", name="i4", tid="i8", corr="i8")
    steps: list[Step] = []
    bytes_read = 0
    events = 0
    have_kernel_details = (out / "kernel_details.csv").is_file()
    meta_extra: dict[str, Any] = {}
    pipes: dict[str, list[float]] = {}  # kernel name -> [time, mac·time, vec·time, mte2·time]
    if have_kernel_details:
        bytes_read += (out / "kernel_details.csv").stat().st_size
        lists = kern.lists
        for row in _read_csv(out / "kernel_details.csv"):
            core = row.get("Accelerator Core", row.get("Task Type", ""))
            if core in _NON_COMPUTE_CORES:
                continue
            ts = _float(row.get("Start Time(us)"))
            if math.isnan(ts):
                continue
            lists["ts"].append(ts)
            lists["dur"].append(_float(row.get("Duration(us)", 0)))
            lists["kind"].append(COMPUTE)
            stream_id = row.get("Stream ID", "-1")
            lists["stream"].append(int(stream_id) if stream_id.lstrip("-").isdigit() else -1)
            name = row.get("Name", "")
            lists["name"].append(names.id(name))
            lists["corr"].append(-1)
            events += 1
            dur = lists["dur"][-1]
            acc = pipes.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            acc[0] += dur
            acc[1] += dur * _ratio(row, "aic_mac_ratio")
            acc[2] += dur * _ratio(row, "aiv_vec_ratio")
            acc[3] += dur * max(_ratio(row, "aic_mte2_ratio"), _ratio(row, "aiv_mte2_ratio"))
    trace = out / "trace_view.json"
    if trace.is_file():
        bytes_read += trace.stat().st_size
        pnames: dict[Any, str] = {}
        tnames: dict[tuple[Any, Any], str] = {}
        pending: list[dict[str, Any]] = []
        clocks: list[float] = []
        stream = EventStream(trace, progress=progress)
        for batch in stream.batches():
            for ev in batch:
                ph = ev.get("ph")
                if ph == "M":
                    args = ev.get("args") or {}
                    if ev.get("name") == "process_name":
                        pnames[ev.get("pid")] = str(args.get("name", ""))
                    elif ev.get("name") == "thread_name":
                        tnames[(ev.get("pid"), ev.get("tid"))] = str(args.get("name", ""))
                elif ph == "X":
                    pending.append(ev)
                elif ph == "C" and ev.get("name") == "AI Core Freq":
                    mhz = (ev.get("args") or {}).get("MHz")
                    if isinstance(mhz, int | float):
                        clocks.append(float(mhz))
            # metadata comes first in torch_npu output; resolve what we can per batch
            keep = []
            for ev in pending:
                proc = pnames.get(ev.get("pid"))
                if proc is None:
                    keep.append(ev)
                    continue
                _route(ev, proc, tnames.get((ev.get("pid"), ev.get("tid")), ""), names, kern, ops, steps,
                       have_kernel_details)
            pending = keep
            kern.flush()
            ops.flush()
        events += stream.events
        if clocks:
            meta_extra["clock_mhz_min"] = min(clocks)
    elif not have_kernel_details:
        raise TraceFormatError(f"{root}: neither trace_view.json nor kernel_details.csv in {OUTPUT_DIR}")
    k = kern.build()
    o = ops.build()
    reference: list[ReferenceStep] = []
    if (out / "step_trace_time.csv").is_file():
        for row in _read_csv(out / "step_trace_time.csv"):
            step_txt = row.get("Step", "")
            values = {key: _float(v) for key, v in row.items() if key != "Step"}
            reference.append(ReferenceStep(int(step_txt) if step_txt.isdigit() else -1, values))
    collectives = _collectives(out / "communication.json")
    order = np.argsort(k["ts"], kind="stable")
    rank = _rank_id(root)
    return Profile(
        source=str(root),
        format="ascend_pt",
        rank=rank,
        stage=pipeline_stage(rank, _parallel_groups(root)),
        device="Ascend",
        names=names,
        kernels=Kernels(k["ts"][order], k["dur"][order], k["kind"][order], k["stream"][order], k["name"][order],
                        k["corr"][order]),
        ops=HostOps(o["ts"], o["dur"], o["name"], o["tid"], o["corr"]),
        steps=sorted(steps, key=lambda s: s.ts),
        collectives=collectives,
        reference=reference,
        bytes_read=bytes_read,
        events=events,
        meta={"pipe_utilisation": {
            k: (v[0], v[1] / v[0], v[2] / v[0], v[3] / v[0]) for k, v in pipes.items() if v[0] > 0}, **meta_extra},
    )


def _ratio(row: dict[str, str], key: str) -> float:
    value = _float(row.get(key, "nan"))
    return 0.0 if math.isnan(value) else value


def _route(
    ev: dict[str, Any], proc: str, thread: str, names: Names, kern: ColumnBuilder, ops: ColumnBuilder,
    steps: list[Step], have_kernel_details: bool,
) -> None:
    ts = _float(ev.get("ts"))
    dur = _float(ev.get("dur", 0.0))
    name = str(ev.get("name", ""))
    if proc == "HCCL":
        if thread.startswith("Group") and thread.endswith("Communication"):
            _append_kernel(kern, ts, dur, COMMUNICATION, -1, names.id(name))
    elif proc == "Ascend Hardware":
        if not have_kernel_details and not name.startswith(("hcom", "Notify", "Write Value", "EVENT_", "SDMA")):
            _append_kernel(kern, ts, dur, COMPUTE, int(ev.get("tid", -1)), names.id(name))
    elif proc == "Python" or proc.startswith("Python"):
        if name.startswith("ProfilerStep#"):
            match = _STEP.match(name)
            if match:
                steps.append(Step(int(match.group(1)), ts, dur))
        lists = ops.lists
        lists["ts"].append(ts)
        lists["dur"].append(dur)
        lists["name"].append(names.id(name))
        tid = ev.get("tid", 0)
        lists["tid"].append(int(tid) if isinstance(tid, int) else 0)
        lists["corr"].append(-1)


def _append_kernel(kern: ColumnBuilder, ts: float, dur: float, kind: int, stream: int, name: int) -> None:
    lists = kern.lists
    lists["ts"].append(ts)
    lists["dur"].append(dur)
    lists["kind"].append(kind)
    lists["stream"].append(stream)
    lists["name"].append(name)
    lists["corr"].append(-1)


def _collectives(path: Path) -> list[Collective]:
    if not path.is_file():
        return []
    data = orjson.loads(path.read_bytes())
    out: list[Collective] = []
    seq: dict[str, int] = {}
    for _step, kinds in sorted(data.items()) if isinstance(data, dict) else []:
        if not isinstance(kinds, dict):
            continue
        for kind in ("collective", "p2p"):
            for key, info in (kinds.get(kind) or {}).items():
                name, _, group = key.partition("@")
                if name.startswith("Total") or not isinstance(info, dict):
                    continue
                time_info = info.get("Communication Time Info") or {}
                bw = info.get("Communication Bandwidth Info") or {}
                sizes: list[float] = []
                times: list[float] = []
                total_mb = 0.0
                for transport, stats in bw.items():
                    if transport == "SDMA" or not isinstance(stats, dict):
                        continue  # SDMA repeats HCCS/PCIE/SIO totals
                    total_mb += float(stats.get("Transit Size(MB)", 0) or 0)
                    for size_mb, (count, ms) in (stats.get("Size Distribution") or {}).items():
                        sizes.extend([float(size_mb) * 1e6] * int(count))
                        times.extend([float(ms) * 1e3 / max(int(count), 1)] * int(count))
                match = _HCOM_OP.match(name)
                n = seq.get(group, 0)
                seq[group] = n + 1
                out.append(Collective(
                    name=name,
                    op=(match.group(1).lower() if match else kind),
                    ts=float(time_info.get("Start Timestamp(us)", math.nan)),
                    dur=float(time_info.get("Elapse Time(ms)", 0.0)) * 1e3,
                    bytes=total_mb * 1e6 if total_mb else math.nan,
                    group=group,
                    seq=n,
                    transfers_bytes=tuple(sizes),
                    transfers_us=tuple(times),
                ))
    return sorted(out, key=lambda c: c.ts)
