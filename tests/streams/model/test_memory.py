"""The expected-memory model: seed 004's tables as special cases, ZeRO's published figures, the phases."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from streams.model.memory import (
    Layout,
    ModelShape,
    expected_peak_bytes,
    layer_activation_bytes,
    seed004_static,
    static_bytes,
)

GB = 1e9


def gpt(s: int, b: int, h: int, a: int, **kw: object) -> ModelShape:
    """The seed's GPT: fp16 activations, byte dropout masks, GeLU FFN of 4h, eager attention."""
    base = ModelShape(params=1e9, layers=1, hidden=h, heads=a, seq=s, micro_batch=b, precision=2, mask_bytes=1,
                      dropout=True, activation="gelu", attention="eager")
    return replace(base, **kw)  # type: ignore[arg-type]


GRID = list(itertools.product((512, 2048), (1, 4), (1024, 4096), (16, 32), (2, 4, 8)))


def test_seed004_7b_static_exact() -> None:
    got = seed004_static(7e9, 8)
    assert got == {"no_parallel": 70 * GB, "optimizer_parallel": 8.75 * GB, "optimizer_parallel_grad_accum": 22.75 * GB}


@pytest.mark.parametrize(("s", "b", "h", "a", "t"), GRID)
def test_seed004_activation_table_forms(s: int, b: int, h: int, a: int, t: int) -> None:
    sbh = s * b * h
    cases = [
        (gpt(s, b, h, a), Layout(), sbh * (34 + 5 * a * s / h)),
        (gpt(s, b, h, a), Layout(tp=t), sbh * (10 + (24 + 5 * a * s / h) / t)),
        (gpt(s, b, h, a), Layout(tp=t, sp=True), sbh * (34 + 5 * a * s / h) / t),
        (gpt(s, b, h, a, recompute="selective"), Layout(tp=t), sbh * (10 + 24 / t)),
        (gpt(s, b, h, a, recompute="selective"), Layout(tp=t, sp=True), sbh * 34 / t),
        (gpt(s, b, h, a, recompute="full"), Layout(), sbh * 2),
    ]
    for shape, layout, want in cases:
        assert math.isclose(layer_activation_bytes(shape, layout), want, rel_tol=1e-12), (shape, layout)


def _per_module_table(s: int, b: int, h: int, a: int, e: int, mask: int) -> float:
    """Seed 004's per-module table, row by row: (elements, is a dropout mask)."""
    sbh, as2b = s * b * h, a * s * s * b
    rows = [
        (sbh, False),                      # QKV matmul input x
        (2 * sbh, False),                  # Q, K
        (as2b, False),                     # softmax result
        (as2b, True),                      # softmax dropout mask
        (as2b, False), (sbh, False),       # dropout result, V
        (sbh, True), (sbh, False),         # attention projection: dropout mask, its input
        (sbh, False),                      # MLP input
        (4 * sbh, False), (4 * sbh, False),  # hidden, activated hidden
        (sbh, True),                       # MLP dropout mask
        (2 * sbh, False),                  # two LayerNorm inputs
    ]
    return sum(n * (mask if is_mask else e) for n, is_mask in rows)


@pytest.mark.parametrize(("s", "b", "h", "a", "t"), GRID[::7])
def test_fp32_form_follows_the_per_module_table(s: int, b: int, h: int, a: int, t: int) -> None:
    for e in (2, 4):
        shape = gpt(s, b, h, a, precision=e)
        assert math.isclose(layer_activation_bytes(shape, Layout()), _per_module_table(s, b, h, a, e, 1),
                            rel_tol=1e-12)
    # fp32 with byte masks: sbh·(66 + 9as/h)
    sbh = s * b * h
    assert math.isclose(layer_activation_bytes(gpt(s, b, h, a, precision=4), Layout()),
                        sbh * (66 + 9 * a * s / h), rel_tol=1e-12)


def test_flash_attention_drops_the_quadratic_term() -> None:
    eager = gpt(4096, 1, 4096, 32)
    flash = replace(eager, attention="flash")
    sbh = 4096 * 4096
    diff = layer_activation_bytes(eager, Layout()) - layer_activation_bytes(flash, Layout())
    # the 5as²b bytes go, a fp32 log-sum-exp per (batch, head, position) comes
    assert math.isclose(diff, sbh * 5 * 32 * 4096 / 4096 - 4 * 32 * 4096, rel_tol=1e-12)


def test_grouped_query_attention_shrinks_k_and_v() -> None:
    mha = gpt(2048, 1, 4096, 32, kv_heads=32, attention="flash", dropout=False)
    gqa = replace(mha, kv_heads=8)
    sbh = 2048 * 4096
    # K and V are g·sbh each: two tensors of 2 bytes shrink by (1 - 8/32)
    assert math.isclose(layer_activation_bytes(mha, Layout()) - layer_activation_bytes(gqa, Layout()),
                        2 * 2 * sbh * (1 - 8 / 32), rel_tol=1e-12)


def test_zero_stages_reproduce_the_zero_paper() -> None:
    """ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, N_d = 64, mixed-precision Adam
    (K = 12): 120 GB baseline, 31.4 GB P_os, 16.6 GB P_os+g, 1.9 GB P_os+g+p."""
    psi, nd = 7.5e9, 64
    shape = ModelShape(params=psi, layers=1, hidden=1, heads=1, seq=1, micro_batch=1, precision=2,
                       master_weights=True, optimizer="adam")
    want = {0: 16 * psi, 1: 4 * psi + 12 * psi / nd, 2: 2 * psi + 14 * psi / nd, 3: 16 * psi / nd}
    paper = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, exact in want.items():
        got = math.fsum(static_bytes(shape, Layout(dp=nd, zero_stage=stage)))
        assert math.isclose(got, exact, rel_tol=1e-12), stage
        assert round(got / GB, 1) == paper[stage]


def test_sgd_and_no_optimizer_states() -> None:
    base = ModelShape(params=1e9, layers=1, hidden=1, heads=1, seq=1, micro_batch=1, precision=4)
    assert static_bytes(replace(base, optimizer="sgd"), Layout())[2] == 4e9
    assert static_bytes(replace(base, optimizer="none"), Layout())[2] == 0.0


def test_pipeline_first_stage_holds_p_microbatches_of_its_layers() -> None:
    shape = gpt(2048, 1, 4096, 32, layers=32, params=7e9, vocab=None)
    one = layer_activation_bytes(shape, Layout(pp=4))
    full = expected_peak_bytes(shape, Layout(pp=4, microbatches=16, grad_lifetime="before_forward"))
    # 1F1B: min(p, m) = 4 micro-batches of 32/4 layers = 32 layers' worth on the first stage
    assert full.phase == "forward_end"
    assert math.isclose(full.activations, 4 * 8 * one, rel_tol=1e-12)
    short = expected_peak_bytes(shape, Layout(pp=4, microbatches=2, grad_lifetime="before_forward"))
    assert math.isclose(short.activations, 2 * 8 * one, rel_tol=1e-12)
    # the pipeline keeps a gradient buffer even where the framework fuses the update (seed 004)
    assert static_bytes(shape, Layout(pp=4, grad_lifetime="fused"))[1] > 0
    assert static_bytes(shape, Layout(pp=1, grad_lifetime="fused"))[1] == 0


def test_full_recompute_adds_one_layer_rebuilt() -> None:
    shape = gpt(2048, 1, 4096, 32, layers=32, params=1e7, vocab=None, recompute="full")
    est = expected_peak_bytes(shape, Layout(grad_lifetime="before_forward"))
    stored = 32 * 2 * 2048 * 4096
    assert est.phase == "forward_end"
    assert math.isclose(est.activations, stored + layer_activation_bytes(replace(shape, recompute="none"), Layout()),
                        rel_tol=1e-12)


def test_peak_phase_and_dominant_component() -> None:
    """A big-vocab, short-sequence model peaks in the optimizer; a long sequence in the forward."""
    wide = ModelShape(params=50e6, layers=2, hidden=1024, heads=8, seq=16, micro_batch=1, vocab=32000, precision=4,
                      attention="flash", dropout=False)
    est = expected_peak_bytes(wide, Layout(holds_output=False))
    assert est.phase == "optimizer"
    assert est.activations == 0.0
    assert est.dominant == "optimizer_states"
    long = replace(wide, seq=8192, micro_batch=8)
    est = expected_peak_bytes(long, Layout(holds_output=False))
    assert est.phase in ("forward_end", "backward_start")
    assert est.dominant == "activations"
    assert math.isclose(est.total, math.fsum(est.components().values()), rel_tol=1e-12)


def test_grad_lifetime_orders_the_peak() -> None:
    shape = ModelShape(params=100e6, layers=4, hidden=1024, heads=8, seq=1024, micro_batch=4, vocab=32000,
                       precision=2, master_weights=True)
    totals = {g: expected_peak_bytes(shape, Layout(grad_lifetime=g)).total
              for g in ("keep", "before_backward", "before_forward")}
    assert totals["keep"] >= totals["before_backward"] >= totals["before_forward"]
    assert totals["keep"] > totals["before_forward"]


def test_tensor_parallel_splits_weights_and_vocab() -> None:
    shape = ModelShape(params=7e9, layers=32, hidden=4096, heads=32, seq=4096, micro_batch=1, vocab=32000,
                       precision=2, master_weights=True)
    w1 = static_bytes(shape, Layout())[0]
    w8 = static_bytes(shape, Layout(tp=8))[0]
    assert math.isclose(w1 / w8, 8.0, rel_tol=1e-12)
    assert expected_peak_bytes(shape, Layout(tp=8, sp=True)).total < expected_peak_bytes(shape, Layout(tp=8)).total


def test_logits_held_by_the_loop_count_at_the_optimizer_step() -> None:
    shape = ModelShape(params=50e6, layers=2, hidden=1024, heads=8, seq=16, micro_batch=2, vocab=32000, precision=4,
                       attention="flash", dropout=False)
    held = expected_peak_bytes(shape, Layout(holds_output=True))
    free = expected_peak_bytes(shape, Layout(holds_output=False))
    assert held.phase == free.phase == "optimizer"
    assert held.total - free.total == 4 * 16 * 2 * 32000


def test_pytorch_math_attention_and_inner_ffn_dropout() -> None:
    """PyTorch's SDPA math path keeps scaled Q and K copies; a dropout inside the FFN keeps its mask
    and output, so ReLU keeps two ffn-wide tensors as GeLU does."""
    s, b, h, a, f = 256, 2, 512, 8, 1536
    sbh, sbf = s * b * h, s * b * f
    base = gpt(s, b, h, a, ffn=f, precision=4, mask_bytes=4, kv_heads=2)
    for t in (1, 4):
        lay = Layout(tp=t)
        math_path = layer_activation_bytes(replace(base, attention="math"), lay) - layer_activation_bytes(base, lay)
        assert math.isclose(math_path, 4 * (1 + 2 / 8) * sbh / t, rel_tol=1e-12)
    relu = replace(base, activation="relu")
    inner = layer_activation_bytes(replace(relu, ffn_dropout=True), Layout()) - layer_activation_bytes(relu, Layout())
    assert math.isclose(inner, 4 * sbf + 4 * sbf, rel_tol=1e-12)  # one more fp32 tensor and an fp32 mask
    no_drop = replace(relu, dropout=False)
    assert layer_activation_bytes(replace(no_drop, ffn_dropout=True), Layout()) == layer_activation_bytes(
        no_drop, Layout())
