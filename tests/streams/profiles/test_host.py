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
