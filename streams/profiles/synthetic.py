"""Synthetic Kineto traces of any size, written streaming to disk (tests and `make bench-parse`).

Each step has forward/backward compute kernels launched by cudaLaunchKernel (with correlation
ids), an NCCL all-reduce per bucket with 2024-style collective args, and host operators; a
rank can be made late by `delay_us` of extra device work before each collective: it starts the
collective last and runs it shortest (the others wait inside theirs), a straggler with ground truth.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO, Any

import orjson

_KERNELS = (
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, T, T)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(T)",
    "Memcpy DtoD (Device -> Device)",
)


def _step_events(step: int, t0: float, rank: int, layers: int, corr0: int, delay_us: float,
                 new_names: bool) -> tuple[list[dict[str, Any]], float, int]:
    pid, tid = 1000 + rank, 1000 + rank
    events: list[dict[str, Any]] = []
    t = t0
    corr = corr0
    gpu_t = t0 + 50.0
    step_start = t0
    comm_name = ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)" if new_names
                 else "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    for layer in range(layers):
        name = _KERNELS[layer % len(_KERNELS)]
        dur = 30.0 + (layer % 7) * 5.0
        corr += 1
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": pid, "tid": tid, "ts": t,
                       "dur": 12.0, "args": {"External id": corr, "Sequence number": corr}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": t + 2.0, "dur": 6.0, "args": {"External id": corr, "correlation": corr}})
        start = max(gpu_t, t + 10.0)
        cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": start, "dur": dur,
                       "args": {"External id": corr, "device": 0, "stream": 7, "correlation": corr,
                                "grid": [80, 1, 1], "block": [256, 1, 1]}})
        events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": t + 2.0, "cat": "ac2g",
                       "name": "ac2g"})
        events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": start, "cat": "ac2g", "name": "ac2g",
                       "bp": "e"})
        gpu_t = start + dur
        t += 15.0
        if layer % 8 == 7:
            corr += 1
            gpu_t += delay_us  # the late rank's compute before the collective runs longer
            nelems = 1 << 20
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                           "ts": t, "dur": 5.0, "args": {"External id": corr, "correlation": corr}})
            start = max(t + 8.0, gpu_t)
            comm_dur = 120.0 - min(delay_us, 100.0)
            events.append({"ph": "X", "cat": "kernel", "name": comm_name, "pid": 0, "tid": 20, "ts": start,
                           "dur": comm_dur, "args": {"External id": corr, "device": 0, "stream": 20,
                                                     "correlation": corr,
                                                     "Collective name": "allreduce", "In msg nelems": nelems,
                                                     "Out msg nelems": nelems, "Group size": 2, "dtype": "Float",
                                                     "Process Group Name": "0",
                                                     "Process Group Ranks": "[0, 1]"}})
            gpu_t = max(gpu_t, start + comm_dur)
    end = max(t, gpu_t) + 20.0
    events.insert(0, {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": tid,
                      "ts": step_start, "dur": end - step_start, "args": {}})
    return events, end, corr


def write_trace(path: Path, target_bytes: int, rank: int = 0, world: int = 2, layers: int = 2000,
                delay_us: float = 0.0, new_names: bool = False) -> int:
    """Write a Kineto trace of about target_bytes (at least two steps); returns bytes written."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    written = 0
    with opener(path, "wb") as fh:
        out: IO[bytes] = fh
        head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                    "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world,
                                                   "ranks": list(range(world))}]}}
        blob = orjson.dumps(head)[:-1] + b', "traceEvents": ['
        out.write(blob)
        written += len(blob)
        t = 1.7e15
        corr = 0
        step = 0
        first = True
        while written < target_bytes or step < 3:
            events, t, corr = _step_events(step, t, rank, layers, corr, delay_us, new_names)
            body = orjson.dumps(events)[1:-1]
            if not first:
                out.write(b",\n")
                written += 2
            out.write(body)
            written += len(body)
            first = False
            step += 1
            t += 100.0
        tail = b'], "traceName": "synthetic", "baseTimeNanoseconds": 0}'
        out.write(tail)
        written += len(tail)
    return written
