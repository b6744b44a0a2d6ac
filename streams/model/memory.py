"""Expected device memory per rank: what a training step should need at its peak (issue #44, item 4).

Derived from seed 004 (MindSpore tuning guide, 内存分析), generalised term by term so that its
tables are special cases (tests check they coincide):

- static memory: FP16 weight 2N + FP32 Adam variance 4N + FP32 momentum 4N = 10N; with
  optimizer parallelism of degree t, 10N/t; with gradient accumulation (or pipeline
  parallelism) one more gradient copy, 10N/t + 2N;
- activation memory per transformer layer, in bytes, for GPT: `sbh·[34 + 5as/h]` without
  parallelism, `sbh·[10 + (24 + 5as/h)/t]` with TP, `sbh·[34 + 5as/h]/t` with TP+SP,
  `sbh·[10 + 24/t]` TP + selective recompute, `sbh·34/t` TP+SP+selective, `2sbh` full recompute.

The general form counts, as the seed's per-module table does, every tensor autograd keeps for
the backward pass, in elements times their bytes (`_layer_activation_bytes`), and adds what a
real PyTorch step holds besides them (the loss head, DDP's gradient buckets, the optimizer's
temporaries, gradients kept by the loop). A step's peak is the largest of three moments
(`PEAK_MOMENTS`): the end of the forward pass, the start of the backward pass (the loss's gradients),
and the optimizer step; the estimate names the components of the winning moment.

Pure: no I/O, no framework import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from schemas.job import (
    ShapeActivation,
    ShapeAttention,
    ShapeGradLifetime,
    ShapeOptimizer,
    ShapeOptimizerImpl,
    ShapeRecompute,
)

# the contract's words for them (a job `start` event's model_shape, contract 1.5)
Optimizer = ShapeOptimizer
Recompute = ShapeRecompute
Attention = ShapeAttention
Activation = ShapeActivation
GradLifetime = ShapeGradLifetime
OptimizerImpl = ShapeOptimizerImpl

PEAK_MOMENTS = ("forward_end", "backward_start", "optimizer")

# Tensors of width `ffn` an FFN keeps for backward, by activation function. GeLU/SiLU need
# their input and the linear after them needs their output (two, the seed's 8sbh + 8sbh);
# ReLU's backward reads its own output, which is also the next linear's input (one);
# SwiGLU keeps the gate and up projections, silu(gate) and their product (four).
_FFN_SAVED: dict[str, int] = {"gelu": 2, "relu": 1, "swiglu": 4}
# With a dropout between the activation and the second linear (torch.nn.TransformerEncoderLayer),
# the second linear keeps the dropout's output instead: ReLU then keeps two as well.
_FFN_SAVED_INNER_DROPOUT: dict[str, int] = {"gelu": 2, "relu": 2, "swiglu": 4}

# Optimizer states per parameter (Adam: momentum and variance; SGD: momentum).
_OPT_STATES: dict[str, int] = {"adam": 2, "sgd": 1, "none": 0}


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A decoder-only transformer and its numeric recipe, as a job's `start` event can carry it.

    `params` is N, the total parameter count (embeddings included). `ffn` defaults to 4·hidden
    (GPT); `kv_heads` to `heads` (no grouped-query attention). `precision` is the bytes of an
    activation element (bf16/fp16 = 2, fp32 = 4) and, unless `param_bytes` says otherwise, of
    a weight and a gradient (PyTorch autocast keeps fp32 weights: param_bytes = 4 with
    precision = 2). `state_bytes` is an optimizer state's element (fp32 Adam moments = 4, the
    seed's assumption even with fp16 weights). `master_weights` adds an fp32 copy of the
    weights (Megatron / apex O2 style mixed precision) when the weights are narrower.
    `dropout`: the model trains with dropout, so every dropout keeps a mask of `mask_bytes`
    per element (1 in the seed: a byte mask; PyTorch's CPU kernel keeps a full-precision one).
    `attention`: "eager" keeps the a·s² softmax (and its dropout) for backward — the seed's
    5as/h term; "math" is PyTorch's SDPA fallback (what CPU SDPA uses with attention dropout):
    eager plus the scaled copies of Q and K it multiplies; "flash" (FlashAttention, PyTorch's
    SDPA flash/memory-efficient kernels) keeps only its output and a fp32 log-sum-exp per
    (batch, head, position). `ffn_dropout`: a dropout between the FFN's activation and its
    second linear (torch.nn.TransformerEncoderLayer has one, GPT/Megatron do not), keeping an
    ffn-wide mask and output.
    `loss_bytes`: the log-probabilities' element (cross-entropy runs in fp32 under autocast).
    `largest_param`: elements of the largest single weight tensor (the for-loop optimizer's
    temporaries are sized by it); by default the largest of the embedding, an FFN matrix and
    the fused QKV projection.
    """

    params: float
    layers: int
    hidden: int
    heads: int
    seq: int
    micro_batch: int
    kv_heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    precision: int = 2
    param_bytes: int | None = None
    state_bytes: int = 4
    optimizer: Optimizer = "adam"
    master_weights: bool = False
    recompute: Recompute = "none"
    activation: Activation = "gelu"
    attention: Attention = "eager"
    dropout: bool = True
    ffn_dropout: bool = False
    mask_bytes: int = 1
    loss_bytes: int = 4
    largest_param: float | None = None

    @property
    def ffn_width(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def kv_ratio(self) -> float:
        """g = kv_heads / heads: K and V are g·sbh each (grouped-query attention)."""
        return (self.kv_heads if self.kv_heads is not None else self.heads) / self.heads

    @property
    def weight_bytes(self) -> int:
        return self.param_bytes if self.param_bytes is not None else self.precision

    def largest_tensor(self) -> float:
        if self.largest_param is not None:
            return self.largest_param
        h = self.hidden
        qkv = h * h * (1 + 2 * self.kv_ratio)
        return float(max(h * self.ffn_width, qkv, h * (self.vocab or 0)))


@dataclass(frozen=True, slots=True)
class Layout:
    """How the job is spread over ranks, and what its training loop keeps alive.

    Parallel degrees: `tp` (tensor), `pp` (pipeline), `dp` (data), `sp` (Megatron sequence
    parallelism over the TP group: every activation split by tp). `zero_stage` / `zero_degree`
    (default: dp) shard, as ZeRO does, stage 1 the optimizer states (and master weights),
    stage 2 also the gradients, stage 3 also the weights; MindSpore's optimizer parallelism
    (the seed's t) is stage 3 with `shard_grads=False` (its accumulation buffer is not split).
    `grad_accum`: micro-batches accumulated per optimizer step (pp = 1); `microbatches`: per
    pipeline flush (default pp). Under 1F1B the first stage holds min(pp, microbatches)
    micro-batches of activations for its L/pp layers, i.e. the whole model's L layers' worth.

    Loop behaviour (PyTorch, measured on the CPU allocator; see docs/model.md):
    `grad_lifetime` "keep" (zero_grad(set_to_none=False) or accumulation: gradients live the
    whole step — the conservative default), "before_forward" (set to None at the step's start),
    "before_backward" (set to None between forward and backward), "fused" (no gradient buffer:
    MindSpore graph mode applies the update as gradients are produced, the seed's static table;
    accumulation or pipelining still adds one copy, as the seed says).
    `ddp_buckets`: PyTorch DDP without gradient_as_bucket_view keeps a flat copy of the
    gradients in its buckets. `holds_output`: the loop keeps the model's output (`out = model(x)`), so the logits live
    through backward, the optimizer step and the next forward. `optimizer_impl`: PyTorch's
    "for_loop" Adam allocates two temporaries of the parameter it updates (sqrt, then the
    division), "foreach" one of every parameter at once, "fused" none.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    sp: bool = False
    zero_stage: int = 0
    zero_degree: int | None = None
    shard_grads: bool | None = None
    grad_accum: int = 1
    microbatches: int | None = None
    grad_lifetime: GradLifetime = "keep"
    ddp_buckets: bool = False
    holds_output: bool = True
    optimizer_impl: OptimizerImpl = "for_loop"

    @property
    def shard(self) -> int:
        return self.zero_degree if self.zero_degree is not None else self.dp

    @property
    def grads_sharded(self) -> bool:
        return self.shard_grads if self.shard_grads is not None else self.zero_stage >= 2


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The expected peak of one rank, in bytes, split by what holds it, at the step's peak `phase`.

    `activations` counts every tensor of the forward pass alive at that moment, the loss
    head's (logits, log-probabilities and, at backward_start, their gradients) included;
    `extra` is what the framework adds: DDP's gradient buckets and the optimizer's temporaries.
    """

    weights: float
    grads: float
    optimizer_states: float
    activations: float
    extra: float
    phase: str

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer_states + self.activations + self.extra

    @property
    def dominant(self) -> str:
        """The largest component: what an incident names as the reason a rank is full."""
        parts = self.components()
        return max(parts, key=lambda k: parts[k])

    def components(self) -> dict[str, float]:
        return {"weights": self.weights, "grads": self.grads, "optimizer_states": self.optimizer_states,
                "activations": self.activations, "extra": self.extra}


def static_bytes(shape: ModelShape, layout: Layout) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states incl. master weights) held through the whole step.

    Seed 004's static memory: with its layout (fp16 weights, fp32 Adam, `grad_lifetime="fused"`)
    this is 2N + 4N + 4N, 10N/t under optimizer parallelism, 10N/t + 2N with accumulation.
    Gradients here are the persistent buffer only; under "before_*" lifetimes they are absent
    for part of the step, which `expected_peak_bytes` accounts per phase.
    """
    n = _params_per_rank(shape, layout)
    t = max(layout.shard, 1)
    weights = n * shape.weight_bytes / (t if layout.zero_stage >= 3 else 1)
    grad_copies = 1.0
    if layout.grad_lifetime == "fused":
        grad_copies = 1.0 if (layout.grad_accum > 1 or layout.pp > 1) else 0.0
    grads = grad_copies * n * shape.weight_bytes / (t if layout.grads_sharded else 1)
    states = n * shape.state_bytes * _OPT_STATES[shape.optimizer]
    if shape.master_weights and shape.weight_bytes < 4:
        states += n * 4
    states /= t if layout.zero_stage >= 1 else 1
    return weights, grads, states


def layer_activation_bytes(shape: ModelShape, layout: Layout) -> float:
    """Bytes one transformer layer keeps for backward for one micro-batch (seed 004's table, general).

    The seed's per-module table, in elements: attention keeps x, Q, K, V and the context (5 sbh
    elements; K and V are g·sbh with grouped-query attention), the softmax output and, with
    dropout, its mask and output (a·s²·b each); the FFN its input and `_FFN_SAVED` tensors of
    width ffn (GeLU: two of 4h, the seed's 16sbh); the two LayerNorms their inputs (2 sbh); with
    dropout, two more byte masks after the attention projection and the FFN. At 2 bytes an
    element and 1 a mask this is the seed's sbh·(34 + 5as/h); at 4 bytes (fp32) it is
    sbh·(66 + 9as/h) with dropout, sbh·(64 + 4as/h) without.

    Tensor parallelism splits Q, K, V, the context, the FFN's inner tensors and the a·s² terms
    by t; the attention and FFN inputs, the LayerNorm inputs and the dropout masks after the
    row-parallel projections stay whole (the seed's 10 sbh) unless sequence parallelism splits
    them too. Selective recompute drops the a·s² terms; full recompute keeps the layer's
    input only (the seed's 2sbh), plus, transiently, one layer's activations during its
    recomputation (`_recompute_transient`).

    PyTorch's own layer (`ffn_dropout`, `attention="math"`) adds an ffn-wide mask and output
    and the scaled Q, K copies; checked against a real nn.TransformerEncoderLayer's saved
    tensors in tests/bench/test_model_memory.py.
    """
    s, b, h, a = shape.seq, shape.micro_batch, shape.hidden, shape.heads
    e, m = shape.precision, shape.mask_bytes if shape.dropout else 0
    t = max(layout.tp, 1)
    sp = t if layout.sp else 1
    sbh = s * b * h
    if shape.recompute == "full":
        return e * sbh / sp
    g = shape.kv_ratio
    # whole under TP: attention input, FFN input, two LayerNorm inputs; two dropout masks
    whole = e * 4 * sbh + 2 * m * sbh
    # split under TP: Q, K, V, the context, the FFN's inner tensors
    sbf = s * b * shape.ffn_width
    if shape.ffn_dropout and shape.dropout:
        ffn = e * _FFN_SAVED_INNER_DROPOUT[shape.activation] * sbf + m * sbf
    else:
        ffn = e * _FFN_SAVED[shape.activation] * sbf
    split = e * (2 + 2 * g) * sbh + ffn
    if shape.attention == "math":
        split += e * (1 + g) * sbh  # q·√scale and k·√scale, the tensors its first matmul saves
    if shape.recompute == "selective":
        quad = 0.0
    elif shape.attention == "flash":
        quad = 4.0 * a * s * b  # fp32 log-sum-exp per (batch, head, position)
    else:
        # softmax output; with dropout its mask and the dropped-out probabilities
        quad = (e + (m + e if shape.dropout else 0)) * a * s * s * b
    return whole / sp + (split + quad) / t


def _recompute_transient(shape: ModelShape, layout: Layout) -> float:
    """Under full recompute, backward rebuilds one layer's activations at a time."""
    if shape.recompute != "full":
        return 0.0
    return layer_activation_bytes(replace(shape, recompute="none"), layout)


def _params_per_rank(shape: ModelShape, layout: Layout) -> float:
    """N split by TP and PP. The first stage also holds the input embedding whole (when vocab is known)."""
    tp, pp = max(layout.tp, 1), max(layout.pp, 1)
    if pp == 1 or not shape.vocab:
        return shape.params / (tp * pp)
    emb = shape.vocab * shape.hidden
    return ((shape.params - emb) / pp + emb) / tp


def expected_peak_bytes(shape: ModelShape, layout: Layout) -> MemoryEstimate:
    """The expected peak allocated bytes of the rank that peaks (pipeline: the first stage).

    Three moments of a step, the largest wins:
    - forward_end: static memory (gradients unless the loop set them to None before the
      forward) + every layer's saved activations for the in-flight micro-batches + the loss
      head (final hidden state, logits, fp32 log-probabilities; the previous step's logits
      while the loop holds them are no larger than the log-probabilities when fp32);
    - backward_start: the same, less the gradients freed by a "before_backward" zero_grad,
      plus the gradients of the log-probabilities and of the logits;
    - optimizer: static memory with every gradient + the logits the loop holds + the
      optimizer's temporaries.
    The loss head is on the last pipeline stage, so with pp > 1 it is left out (the first
    stage, whose in-flight activations are largest, is the one estimated).
    """
    w, g_full, st = static_bytes(shape, layout)
    n = _params_per_rank(shape, layout)
    extra_static = 0.0
    if layout.ddp_buckets:
        extra_static += n * shape.weight_bytes
    in_flight = min(layout.pp, layout.microbatches if layout.microbatches is not None else layout.pp)
    layers_here = shape.layers / max(layout.pp, 1)
    acts = in_flight * layers_here * layer_activation_bytes(shape, layout) + _recompute_transient(shape, layout)

    s, b, e, t = shape.seq, shape.micro_batch, shape.precision, max(layout.tp, 1)
    head_fwd = head_bwd = held = 0.0
    if shape.vocab and layout.pp == 1:
        sbv = s * b * shape.vocab / t
        sp = t if layout.sp else 1
        logits_peak = max(e + shape.loss_bytes, 2 * e if layout.holds_output else 0)
        head_fwd = e * s * b * shape.hidden / sp + logits_peak * sbv
        head_bwd = e * s * b * shape.hidden / sp + ((e if layout.holds_output else 0) + 3 * shape.loss_bytes) * sbv
        held = e * sbv if layout.holds_output else 0.0

    grads_fwd = 0.0 if layout.grad_lifetime == "before_forward" else g_full
    grads_bwd = 0.0 if layout.grad_lifetime in ("before_forward", "before_backward") else g_full
    opt_tmp = _optimizer_transient(shape, layout, n)
    cands = [
        MemoryEstimate(w, grads_fwd, st, acts + head_fwd, extra_static, "forward_end"),
        MemoryEstimate(w, grads_bwd, st, acts + head_bwd, extra_static, "backward_start"),
        MemoryEstimate(w, g_full, st, held, extra_static + opt_tmp, "optimizer"),
    ]
    return max(cands, key=lambda c: c.total)


def _optimizer_transient(shape: ModelShape, layout: Layout, n: float) -> float:
    """Adam's update `p -= lr·m / (sqrt(v) + eps)` allocates its denominator.

    PyTorch's for-loop Adam (the CPU default) makes sqrt(v) and then its quotient for one
    parameter at a time: two temporaries of the largest parameter. The foreach form (the CUDA
    default) makes sqrt(v) for every parameter of the group at once: one more copy of the
    states' size (sharded as they are). Fused kernels and SGD allocate none.
    """
    if shape.optimizer != "adam" or layout.optimizer_impl == "fused":
        return 0.0
    if layout.optimizer_impl == "foreach":
        return n * shape.state_bytes / (layout.shard if layout.zero_stage >= 1 else 1)
    tp = max(layout.tp, 1)
    return 2.0 * shape.largest_tensor() / tp * shape.state_bytes


def seed004_static(n: float, t: int) -> dict[str, float]:
    """Seed 004's three static-memory cases through the general model (bytes).

    fp16 weights, fp32 Adam moments, no master copy and no gradient buffer (MindSpore graph
    mode): 10N; optimizer parallelism of degree t shards weights and states: 10N/t; gradient
    accumulation adds a whole fp16 gradient copy: 10N/t + 2N.
    """
    shape = ModelShape(params=n, layers=1, hidden=1, heads=1, seq=1, micro_batch=1, precision=2, state_bytes=4,
                       optimizer="adam", master_weights=False)
    cases = {
        "no_parallel": Layout(grad_lifetime="fused"),
        "optimizer_parallel": Layout(grad_lifetime="fused", zero_stage=3, zero_degree=t, dp=t),
        "optimizer_parallel_grad_accum": Layout(grad_lifetime="fused", zero_stage=3, zero_degree=t, dp=t,
                                                shard_grads=False, grad_accum=2),
    }
    return {k: math.fsum(static_bytes(shape, lay)) for k, lay in cases.items()}


_SHAPE_FIELDS = frozenset(f.name for f in fields(ModelShape))
_LAYOUT_FIELDS = frozenset(f.name for f in fields(Layout))
_REQUIRED = ("params", "layers", "hidden", "heads", "seq", "micro_batch")


def from_contract(shape: Mapping[str, Any], parallel: Mapping[str, Any]) -> tuple[ModelShape, Layout] | None:
    """The model and layout a job's `start` declared (contract 1.5 `model_shape`, the event's `parallel`), or
    None when the shape lacks what the formulas need (parameters, layers, hidden size, heads, sequence
    length, micro-batch): an estimate from guessed sizes would be no expectation.

    The contract's fields name the model's and the loop's (sp, zero_*, grad_*, microbatches, ddp_buckets,
    optimizer_impl are the layout's); a field left out keeps the model's default. Parallel degrees come from
    `parallel` (tp, pp, dp; 1 where absent)."""
    if any(not isinstance(shape.get(k), int) or shape[k] < 1 for k in _REQUIRED):
        return None
    model = {k: v for k, v in shape.items() if k in _SHAPE_FIELDS and v is not None}
    loop = {k: v for k, v in shape.items() if k in _LAYOUT_FIELDS and v is not None}
    degrees: dict[str, Any] = {k: int(parallel[k]) for k in ("tp", "pp", "dp")
                               if isinstance(parallel.get(k), int) and parallel[k] >= 1}
    try:
        return ModelShape(**model), Layout(**loop, **degrees)
    except TypeError:
        return None
