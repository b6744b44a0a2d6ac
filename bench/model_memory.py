"""`memory_error` of `make bench-model`: the expected peak (streams/model/memory.py) against real runs.

Each case runs the real workload (producers/workloads/ddp_transformer.py, DDP over gloo on
CPU, AdamW, mode `none`: no hook code) in its own subprocess, with a torch.profiler
(`profile_memory=True`) around the whole rank from before the model is built, so the
allocator's "Total Allocated" on every "[memory]" event is the rank's live tensor bytes. A
step runs from the end of one `Optimizer.step` to the end of the next; the measured peak is
the largest over the steady steps (the first step builds Adam's states and is left out).

The expected peak maps the workload's real architecture onto the model (`workload_shape`):
nn.TransformerEncoderLayer (post-LN, ReLU FFN of width `ffn`, dropout 0, attention through
PyTorch's SDPA, which on CPU is the flash kernel), fp32 everywhere, an untied LM head, DDP
with gradient buckets, `zero_grad(set_to_none=True)` between forward and backward, and the
loop holding `out` (the logits).

`layer_cases`: the branches the workload does not take (dropout, GeLU, CPU SDPA's math path),
checked on one real nn.TransformerEncoderLayer: the bytes its forward leaves for backward.

`python -m bench.model_memory` prints `memory_section()` as JSON; `--measure` is the child.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from streams.model.memory import Layout, ModelShape, expected_peak_bytes, seed004_static

ROOT = Path(__file__).resolve().parent.parent

# The workload's knobs per case: an activation-bound step, a weight-bound one (the optimizer's
# temporaries peak), a long sequence on 2 ranks (the loss's backward peaks), a deep narrow model,
# and an odd one on 2 ranks (FFN not a multiple of hidden, 2 heads, s = 384). The PyTorch-specific
# terms of the model were read off traces of the first three; the last two were not looked at first.
CASES: dict[str, dict[str, int]] = {
    "h256_l4_s128_b8": {"world": 1, "hidden": 256, "heads": 4, "layers": 4, "ffn": 1024, "seq": 128, "batch": 8,
                        "vocab": 1024},
    "h512_l2_v8192": {"world": 1, "hidden": 512, "heads": 8, "layers": 2, "ffn": 2048, "seq": 32, "batch": 2,
                      "vocab": 8192},
    "h128_l3_s256_w2": {"world": 2, "hidden": 128, "heads": 4, "layers": 3, "ffn": 256, "seq": 256, "batch": 8,
                        "vocab": 512},
    "h192_l8_s64_b16": {"world": 1, "hidden": 192, "heads": 6, "layers": 8, "ffn": 768, "seq": 64, "batch": 16,
                        "vocab": 2048},
    "h96_f200_s384_w2": {"world": 2, "hidden": 96, "heads": 2, "layers": 2, "ffn": 200, "seq": 384, "batch": 4,
                         "vocab": 3000},
}
STEPS = 4
GB = 1e9


def workload_params(c: dict[str, int]) -> int:
    """N of the workload's TinyLM: embedding, `layers` TransformerEncoderLayers, untied head (with bias)."""
    h, f, v = c["hidden"], c["ffn"], c["vocab"]
    layer = (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h) + 4 * h  # in/out proj, FFN, 2 LN
    return v * h + c["layers"] * layer + h * v + v


def workload_shape(c: dict[str, int]) -> ModelShape:
    """The workload's model as the memory model sees it (read from producers/workloads/ddp_transformer.py)."""
    h = c["hidden"]
    return ModelShape(params=workload_params(c), layers=c["layers"], hidden=h, heads=c["heads"], ffn=c["ffn"],
                      seq=c["seq"], micro_batch=c["batch"], vocab=c["vocab"], precision=4, state_bytes=4,
                      optimizer="adam", activation="relu", attention="flash", dropout=False, loss_bytes=4,
                      largest_param=float(max(3 * h * h, h * c["ffn"], h * c["vocab"])))


def workload_layout(c: dict[str, int]) -> Layout:
    """DDP over `world` ranks; zero_grad(set_to_none) after the forward; for-loop AdamW (CPU's default)."""
    return Layout(dp=c["world"], grad_lifetime="before_backward", ddp_buckets=True, holds_output=True,
                  optimizer_impl="for_loop")


def _probe_rank(rank: int, cfg: Any, port: int, out: str) -> None:
    """One rank of the real workload under a memory-profiling torch.profiler; writes its step peaks."""
    import torch

    from producers.workloads import ddp_transformer

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        ddp_transformer._rank_main(rank, cfg, port)
    trace = Path(out, f"trace{rank}.json")
    prof.export_chrome_trace(str(trace))
    events = orjson.loads(trace.read_bytes())["traceEvents"]
    trace.unlink()
    Path(out, f"rank{rank}.json").write_bytes(orjson.dumps(step_peaks(events)))


def step_peaks(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step, the largest "Total Allocated" and the innermost op it happened in.

    Steps end at the end of each `Optimizer.step` range; the first starts with the trace.
    """
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: float(e["ts"]))
    ops = [e for e in events if e.get("ph") == "X" and e.get("name") != "[memory]"]
    ends = sorted(float(e["ts"]) + float(e["dur"]) for e in ops if str(e["name"]).startswith("Optimizer.step"))
    peaks: list[float] = []
    where: list[str] = []
    i = 0
    for end in ends:
        best: dict[str, Any] | None = None
        while i < len(mem) and float(mem[i]["ts"]) <= end:
            if best is None or mem[i]["args"]["Total Allocated"] > best["args"]["Total Allocated"]:
                best = mem[i]
            i += 1
        if best is None:
            peaks.append(math.nan)
            where.append("")
            continue
        ts = float(best["ts"])
        inner = [o for o in ops if float(o["ts"]) <= ts <= float(o["ts"]) + float(o.get("dur", 0))
                 and not str(o["name"]).startswith("PyTorch Profiler")]
        inner.sort(key=lambda o: float(o["ts"]))
        peaks.append(float(best["args"]["Total Allocated"]))
        where.append(" > ".join(str(o["name"]) for o in inner[-3:]))
    return {"peaks": peaks, "where": where}


# One nn.TransformerEncoderLayer in train mode, its forward's saved tensors measured: the branches
# the workload does not take (attention and FFN dropout, which send CPU SDPA to its math path; GeLU).
LAYER_CASES: dict[str, dict[str, Any]] = {
    f"s{s}_b{b}_h{h}_a{a}_f{f}_{act}_p{p}": {"seq": s, "batch": b, "hidden": h, "heads": a, "ffn": f,
                                             "activation": act, "dropout": p}
    for (s, b, h, a, f) in ((128, 4, 256, 4, 1024), (256, 2, 128, 8, 200))
    for act in ("gelu", "relu") for p in (0.0, 0.1)
}


def layer_shape(c: dict[str, Any]) -> ModelShape:
    """nn.TransformerEncoderLayer as the model sees it: CPU SDPA is flash without dropout, math with it;
    the CPU dropout kernel keeps an fp32 mask; the layer has a dropout inside its FFN."""
    drop = c["dropout"] > 0
    return ModelShape(params=0, layers=1, hidden=c["hidden"], heads=c["heads"], ffn=c["ffn"], seq=c["seq"],
                      micro_batch=c["batch"], precision=4, dropout=drop, mask_bytes=4, ffn_dropout=True,
                      activation=c["activation"], attention="math" if drop else "flash")


def layer_saved_bytes(c: dict[str, Any]) -> float:
    """Bytes one real layer's forward leaves allocated for backward (the CPU allocator's events, via the
    profiler), less its input and output."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(c["hidden"], c["heads"], c["ffn"], dropout=c["dropout"],
                                       activation=c["activation"], batch_first=True).train()
    with (tempfile.TemporaryDirectory(prefix="steplens-layer-") as tmp,
          torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof):
        x = torch.randn(c["batch"], c["seq"], c["hidden"], requires_grad=True)
        y = layer(x)
        prof.stop()
        trace = Path(tmp, "layer.json")
        prof.export_chrome_trace(str(trace))
        events = orjson.loads(trace.read_bytes())["traceEvents"]
    # the allocator's running total carries earlier sessions of this process: count this session's
    # own allocations still live at its end instead
    live: dict[int, int] = {}
    for e in sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: float(e["ts"])):
        addr, nbytes = int(e["args"]["Addr"]), int(e["args"]["Bytes"])
        if nbytes > 0:
            live[addr] = nbytes
        else:
            live.pop(addr, None)
    return float(sum(live.values())) - float(x.nbytes + y.nbytes)


def layer_section() -> dict[str, dict[str, object]]:
    """Per LAYER_CASES case: measured and expected saved bytes of one layer."""
    from streams.model.memory import Layout, layer_activation_bytes

    rows: dict[str, dict[str, object]] = {}
    for name, c in LAYER_CASES.items():
        measured = layer_saved_bytes(c)
        expected = layer_activation_bytes(layer_shape(c), Layout())
        rows[name] = {"expected_mb": expected / 1e6, "measured_mb": measured / 1e6,
                      "error": abs(expected - measured) / measured, "device": "cpu", **c}
    return rows


def _measure(c: dict[str, int], out: str) -> None:
    from torch.multiprocessing.spawn import spawn

    from producers.workloads.ddp_transformer import WorkloadConfig, _free_port

    cfg = WorkloadConfig(job="memory-bench", world=c["world"], steps=STEPS, batch=c["batch"], seq=c["seq"],
                         vocab=c["vocab"], hidden=c["hidden"], heads=c["heads"], layers=c["layers"], ffn=c["ffn"],
                         schedule=("none",), follow_control=False)
    spawn(_probe_rank, args=(cfg, _free_port(), out), nprocs=c["world"], join=True)  # type: ignore[no-untyped-call]


def measure_case(c: dict[str, int], timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Run one case in a subprocess; per rank, its step peaks (bytes) and where each happened."""
    with tempfile.TemporaryDirectory(prefix="steplens-mem-") as out:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "bench.model_memory", "--measure", orjson.dumps(c).decode(),
                        "--out", out], cwd=ROOT, env=env, check=True, timeout=timeout_s,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return [orjson.loads(Path(out, f"rank{r}.json").read_bytes()) for r in range(c["world"])]


def memory_section(cases: dict[str, dict[str, int]] | None = None) -> dict[str, object]:
    """`memory_error` (geomean of |expected - measured| / measured), `memory_cases`, `seed004_7b`."""
    rows: dict[str, dict[str, object]] = {}
    errors: list[float] = []
    for name, c in (cases if cases is not None else CASES).items():
        ranks = measure_case(c)
        for rank, res in enumerate(ranks):
            steady = [(p, w) for p, w in zip(res["peaks"][1:], res["where"][1:], strict=True) if not math.isnan(p)]
            measured, where = max(steady)
            est = expected_peak_bytes(workload_shape(c), workload_layout(c))
            err = abs(est.total - measured) / measured
            errors.append(err)
            key = name if c["world"] == 1 else f"{name}/rank{rank}"
            rows[key] = {
                "expected_gb": est.total / GB, "measured_gb": measured / GB, "device": "cpu", "error": err,
                "rank": rank, "expected_phase": est.phase, "measured_at": where, "dominant": est.dominant,
                "expected_components_gb": {k: v / GB for k, v in est.components().items()},
                "params": workload_params(c), "steps_measured": len(steady), **c,
            }
    seed = seed004_static(7e9, 8)
    layers = layer_section()
    return {
        "layer_error_max": max(float(r["error"]) for r in layers.values()),  # type: ignore[arg-type]
        "layer_cases": layers,
        "memory_error": math.exp(sum(math.log(max(e, 1e-12)) for e in errors) / len(errors)),
        "memory_error_max": max(errors),
        "memory_cases": rows,
        "seed004_7b": {f"{k}_gb": v / GB for k, v in seed.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", help="child: a case's config as JSON")
    p.add_argument("--out", help="child: where the ranks write their peaks")
    a = p.parse_args(argv)
    if a.measure:
        _measure(orjson.loads(a.measure), a.out)
        return 0
    sys.stdout.write(orjson.dumps(memory_section(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
