"""bench/model_memory: the workload's parameter count, the step-peak reader, one real tiny run."""

from __future__ import annotations

import math

from bench.model_memory import memory_section, step_peaks, workload_params

TINY = {"world": 1, "hidden": 64, "heads": 4, "layers": 2, "ffn": 96, "seq": 64, "batch": 4, "vocab": 300}


def test_workload_params_match_torch_modules() -> None:
    """The analytic N against the same modules producers/workloads/ddp_transformer.py builds."""
    from torch import nn

    c = TINY
    layer = nn.TransformerEncoderLayer(c["hidden"], c["heads"], c["ffn"], dropout=0.0, batch_first=True)
    mods = [nn.Embedding(c["vocab"], c["hidden"]),
            nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False),
            nn.Linear(c["hidden"], c["vocab"])]
    assert workload_params(c) == sum(p.numel() for m in mods for p in m.parameters())


def test_step_peaks_splits_at_optimizer_steps() -> None:
    def mem(ts: float, total: int) -> dict[str, object]:
        return {"name": "[memory]", "ts": ts, "args": {"Total Allocated": total}}

    events = [
        {"ph": "X", "name": "aten::mm", "ts": 0.5, "dur": 1.0},
        mem(1.0, 10), mem(2.0, 30),
        {"ph": "X", "name": "Optimizer.step#AdamW.step", "ts": 3.0, "dur": 1.0},
        mem(3.5, 25), mem(5.0, 40),
        {"ph": "X", "name": "aten::addmm", "ts": 4.9, "dur": 0.2},
        mem(6.0, 20),
        {"ph": "X", "name": "Optimizer.step#AdamW.step", "ts": 7.0, "dur": 1.0},
    ]
    got = step_peaks(events)
    assert got["peaks"] == [30.0, 40.0]
    assert got["where"] == ["", "aten::addmm"]


def test_memory_section_on_a_real_tiny_run() -> None:
    out = memory_section({"tiny": TINY})
    err = out["memory_error"]
    assert isinstance(err, float) and math.isfinite(err)
    cases = out["memory_cases"]
    assert isinstance(cases, dict)
    row = cases["tiny"]
    assert row["device"] == "cpu" and row["measured_gb"] > 0 and row["steps_measured"] == 3
    assert err < 0.10, row  # the acceptance bar, on a model the cases in CASES never saw
    assert out["seed004_7b"] == {"no_parallel_gb": 70.0, "optimizer_parallel_gb": 8.75,
                                 "optimizer_parallel_grad_accum_gb": 22.75}


def test_a_real_layer_with_dropout_and_gelu_matches_the_table() -> None:
    """The branches the workload does not take: attention/FFN dropout (CPU SDPA's math path), GeLU."""
    from bench.model_memory import LAYER_CASES, layer_saved_bytes, layer_shape
    from streams.model.memory import Layout, layer_activation_bytes

    for name in ("s256_b2_h128_a8_f200_gelu_p0.1", "s128_b4_h256_a4_f1024_relu_p0.0"):
        c = LAYER_CASES[name]
        measured = layer_saved_bytes(c)
        expected = layer_activation_bytes(layer_shape(c), Layout())
        assert abs(expected - measured) / measured < 0.01, (name, expected, measured)
