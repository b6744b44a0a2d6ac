"""CPU causes (spec §3) from host events: many small operators, synchronising calls, compilation, GC,
contention (host ops stretched while the device waits); and the data-loading queue (I/O)."""

from __future__ import annotations

import re

import numpy as np

from streams.profiles.analysis.findings import ProfileFinding
from streams.profiles.analysis.intervals import total, union
from streams.profiles.model import F64, Profile

_SYNC = re.compile(r"(aten::item|aten::_local_scalar_dense|cudaDeviceSynchronize|cudaStreamSynchronize|"
                   r"cudaEventSynchronize|aclrtSynchronize|SynchronizeStream|\.item\(|aten::nonzero)")
# Compilation = the spans torch records *while compiling*: every `dynamo_timed` key ("<key> (dynamo_timed)",
# torch >= 2.1: _compile.compile_inner, entire_frame_compile, backend_compile, compile_fx_inner,
# create_aot_dispatcher_function, GraphLowering.compile_to_module, ...), the same keys without the suffix,
# dynamo's convert_frame `_compile` python frame, and Ascend's operator compilation. Not compilation:
# `CompiledFunction` / `CompiledFunctionBackward` (AOTAutograd running a compiled graph), `Torch-Compiled
# Region` and `TorchDynamo Cache Lookup` (every call of a compiled frame), and any other frame of
# torch/_dynamo or torch/_inductor (eval_frame's wrapper runs around each compiled call).
_COMPILE = re.compile(
    r"(\(dynamo_timed\)$"
    r"|^(_compile\.)?compile_inner\b|^entire_frame_compile\b|^backend_compile\b|^compile_fx(_inner)?\b"
    r"|^create_aot_dispatcher_function\b|^GraphLowering\.compile|^Scheduler\.codegen\b|^inductor_compile\b"
    r"|^async_compile\.wait\b|^OutputGraph\.call_user_compiler\b|^call_user_compiler\b"
    r"|convert_frame\.py\(\d+\): _compile\b"
    r"|aclopCompile|OpCompile|^GE::)")
_GC = re.compile(r"(gc\.collect|Garbage Collect|GC$|^gc_)", re.IGNORECASE)
_DATA = re.compile(r"(DataLoader|_DataLoaderIter|__next__)")


def host_causes(profile: Profile, small_op_us: float = 10.0, sync_share: float = 0.05,
                max_launch_latency_us: float = 50.0) -> list[ProfileFinding]:
    findings: list[ProfileFinding] = []
    steps = profile.steps
    if not steps:
        return findings
    step_time = sum(s.dur for s in steps)
    names = profile.names.items
    ops = profile.ops
    host_calls = [ops, profile.runtime]
    patterns = {"sync": _SYNC, "gc": _GC, "data": _DATA, "compile": _COMPILE}
    totals: dict[str, float] = dict.fromkeys(patterns, 0.0)
    for table in host_calls:
        if len(table) == 0:
            continue
        uniq = np.unique(table.name)
        for cat, pattern in patterns.items():
            ids = [nid for nid in uniq.tolist()
                   if not names[nid].startswith("ProfilerStep") and pattern.search(names[nid])]
            if ids:
                mask = np.isin(table.name, ids)
                # nested calls (python frames around the op) must not count twice: union of intervals
                totals[cat] += total(*union(table.ts[mask], table.ts[mask] + table.dur[mask]))
    n_steps = len(steps)
    if totals["sync"] / step_time >= sync_share:
        findings.append(ProfileFinding(
            "sync_ops", f"synchronising host calls take {totals['sync'] / step_time:.0%} of steps",
            {"sync_us_per_step": totals["sync"] / n_steps, "share": totals["sync"] / step_time}, profile.rank))
    if totals["gc"] / step_time >= 0.02:
        findings.append(ProfileFinding("gc", f"garbage collection takes {totals['gc'] / step_time:.0%} of steps",
                                       {"gc_us_per_step": totals["gc"] / n_steps}, profile.rank))
    if totals["compile"] / step_time >= 0.02:
        findings.append(ProfileFinding("compilation", f"compilation takes {totals['compile'] / step_time:.0%} of steps",
                                       {"compile_us_per_step": totals["compile"] / n_steps}, profile.rank))
    if totals["data"] / step_time >= 0.1:
        findings.append(ProfileFinding("slow_reading",
                                       f"waiting on the DataLoader takes {totals['data'] / step_time:.0%} of steps",
                                       {"data_us_per_step": totals["data"] / n_steps,
                                        "share": totals["data"] / step_time}, profile.rank))
    # dispatch: many tiny device tasks AND a device that waits for the host. The evidence for the wait is the
    # launch latency (launch call -> kernel start): a device starved by its host starts each kernel right after
    # the launch (an empty queue), while a CPU that runs ahead sees latencies of milliseconds, its device busy
    # with earlier work however small the kernels. Without launch/kernel pairs (no correlation ids) there is
    # no evidence, so no verdict.
    k = profile.kernels
    if len(k):
        tiny = float(np.mean(k.dur < small_op_us))
        per_step = len(k) / n_steps
        launch = launch_latency_us(profile)
        if tiny >= 0.5 and per_step >= 200 and launch.size:
            p50 = float(np.median(launch))
            if p50 <= max_launch_latency_us:
                findings.append(ProfileFinding(
                    "dispatch", f"{tiny:.0%} of {per_step:.0f} device tasks per step run under {small_op_us:.0f} µs "
                    f"and start {p50:.0f} µs after their launch (median): host dispatch bound",
                    {"tiny_kernel_ratio": tiny, "kernels_per_step": per_step, "launch_latency_p50_us": p50,
                     "launches": float(launch.size)}, profile.rank))
    return findings


def launch_latency_us(profile: Profile) -> F64:
    """Kernel start − launch call start, paired by correlation id (the `ac2g` flow)."""
    r = profile.runtime
    k = profile.kernels
    if len(r) == 0 or len(k) == 0:
        return np.zeros(0)
    valid = r.corr >= 0
    rc, rts = r.corr[valid], r.ts[valid]
    order = np.argsort(rc)
    rc, rts = rc[order], rts[order]
    pos = np.minimum(np.searchsorted(rc, k.corr), rc.size - 1)
    found = (k.corr >= 0) & (rc[pos] == k.corr)
    return np.asarray(k.ts[found] - rts[pos[found]])
