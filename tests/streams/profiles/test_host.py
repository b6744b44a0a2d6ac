"""Host-side causes (streams/profiles/analysis/host.py) on hand-built Kineto traces and the real samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.profiles.analysis.host import _COMPILE, host_causes
from streams.profiles.importers.ascend_pt import parse_ascend
from streams.profiles.importers.kineto import parse_kineto
from tests.streams.profiles.conftest import ASCEND


def _ev(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _compiled_steps(compile_us: float = 0.0) -> list[dict[str, Any]]:
    """Three 100 ms steps of a torch.compile'd model: 84 % of each step runs the compiled graphs."""
    events = []
    for i in range(3):
        t0 = i * 100_000.0
        events += [
            _ev(f"ProfilerStep#{i + 1}", t0, 100_000.0, cat="user_annotation"),
            _ev("torch/_dynamo/eval_frame.py(632): _fn", t0 + 1_000.0, 84_000.0, cat="python_function"),
            _ev("TorchDynamo Cache Lookup", t0 + 1_000.0, 20.0),
            _ev("Torch-Compiled Region: 0/0", t0 + 1_100.0, 40_000.0),
            _ev("CompiledFunction", t0 + 1_200.0, 39_000.0),
            _ev("CompiledFunctionBackward", t0 + 45_000.0, 40_000.0, tid=2),
        ]
    if compile_us:  # the first step recompiles (a new shape): dynamo's own spans
        events += [_ev("_compile.compile_inner (dynamo_timed)", 90_000.0, compile_us, cat="user_annotation"),
                   _ev("compile_fx_inner (dynamo_timed)", 90_500.0, compile_us - 1_000.0, cat="user_annotation"),
                   _ev("torch/_dynamo/convert_frame.py(676): _compile", 90_000.0, compile_us, cat="python_function")]
    return events


def test_running_compiled_graphs_is_not_compilation(tmp_path: Path) -> None:
    profile = parse_kineto(_trace(tmp_path, _compiled_steps()))
    assert "compilation" not in {f.cause for f in host_causes(profile)}  # was "compilation takes 84 % of steps"
    for name in ("CompiledFunction", "CompiledFunctionBackward", "Torch-Compiled Region: 0/0",
                 "TorchDynamo Cache Lookup", "torch/_dynamo/eval_frame.py(632): _fn"):
        assert not _COMPILE.search(name), name


def test_compile_events_are_compilation(tmp_path: Path) -> None:
    profile = parse_kineto(_trace(tmp_path, _compiled_steps(compile_us=9_000.0)))
    (finding,) = [f for f in host_causes(profile) if f.cause == "compilation"]
    assert finding.summary == "compilation takes 3% of steps"  # 9 ms of 300 ms, nested spans counted once
    assert finding.evidence["compile_us_per_step"] == 3_000.0
    for name in ("entire_frame_compile (dynamo_timed)", "backend_compile", "GraphLowering.compile_to_module",
                 "create_aot_dispatcher_function (dynamo_timed)", "aclopCompile"):
        assert _COMPILE.search(name), name


def test_real_torch_npu_frames_of_torch_dynamo_are_not_compilation(real_samples: Path) -> None:
    # the real ImageNet job runs eagerly; its python frames pass through torch/_dynamo (decorators, eval_frame)
    # and torch/_compile.py, which the old pattern ("torch/_dynamo", "compile") counted as compilation
    for rank in (0, 1):
        profile = parse_ascend(ASCEND / f"rank{rank}_ascend_pt")
        dynamo = [n for n in profile.names.items if "torch/_dynamo" in n or "torch/_compile" in n]
        assert len(dynamo) >= 10
        assert [n for n in profile.names.items if _COMPILE.search(n)] == []


def _tiny_kernels(latency_us: float) -> list[dict[str, Any]]:
    """Three 10 ms steps launching 300 kernels of 5 µs each; every kernel starts `latency_us` after its launch."""
    events = []
    corr = 0
    for i in range(3):
        t0 = i * 10_000.0
        events.append(_ev(f"ProfilerStep#{i + 1}", t0, 10_000.0, cat="user_annotation"))
        for j in range(300):
            corr += 1
            launch = t0 + 10.0 + j * 30.0
            events.append(_ev("cudaLaunchKernel", launch, 4.0, cat="cuda_runtime", correlation=corr))
            events.append(_ev("elementwise_kernel", launch + latency_us, 5.0, cat="kernel", tid=7, stream=7,
                              correlation=corr))
    return events


def test_dispatch_bound_needs_kernels_that_start_right_after_their_launch(tmp_path: Path) -> None:
    # kernels 164 ms after their launch: the CPU is far ahead, the device has queued work
    ahead = parse_kineto(_trace(tmp_path, _tiny_kernels(164_000.0), "ahead.json"))
    assert "dispatch" not in {f.cause for f in host_causes(ahead)}  # was "host dispatch bound"
    # the same kernels 8 µs after their launch: the device waits for each one
    starved = parse_kineto(_trace(tmp_path, _tiny_kernels(8.0), "starved.json"))
    (finding,) = [f for f in host_causes(starved) if f.cause == "dispatch"]
    assert finding.evidence["launch_latency_p50_us"] == 8.0 and "start 8 µs after their launch" in finding.summary
    # no launch/kernel pairs (no correlation ids): no evidence, no verdict
    unpaired = [e for e in _tiny_kernels(8.0) if e["cat"] != "cuda_runtime"]
    assert "dispatch" not in {f.cause for f in host_causes(parse_kineto(_trace(tmp_path, unpaired, "u.json")))}


def test_dispatch_on_the_real_2024_trace_and_the_same_trace_with_the_cpu_164_ms_ahead(real_samples: Path) -> None:
    from tests.streams.profiles.conftest import KINETO

    profile = parse_kineto(KINETO / "nccl_parser_config_nccl_data.json.gz")
    (finding,) = [f for f in host_causes(profile) if f.cause == "dispatch"]
    assert 5.0 < finding.evidence["launch_latency_p50_us"] < 50.0  # 12 µs: the A100 starts kernels as launched
    profile.runtime.ts -= 164_000.0  # every launch 164 ms earlier, as when the CPU runs that far ahead
    assert "dispatch" not in {f.cause for f in host_causes(profile)}
