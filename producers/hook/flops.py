"""Model FLOPs per training step for MFU, from the spec's §1 formulas (MindFormers guide)."""

from __future__ import annotations


def llama_layer_forward_flops(*, batch: int, seq: int, hidden: int, ffn_hidden: int, heads: int,
                              kv_heads: int | None = None) -> float:
    """(4 + 4/q)·b·s·h² + 4·b·s²·h + 6·b·s·h·ĥ with q = heads / kv_heads (GQA factor)."""
    q = heads / (kv_heads or heads)
    b, s, h = batch, seq, hidden
    return (4 + 4 / q) * b * s * h * h + 4 * b * s * s * h + 6 * b * s * h * ffn_hidden


def llama_train_flops(*, layers: int, batch: int, seq: int, hidden: int, ffn_hidden: int, heads: int,
                      vocab: int, kv_heads: int | None = None, recompute: bool = False) -> float:
    """Model FLOPs of one training step: 3x forward (4x with full recomputation), LM head once per forward."""
    forward = layers * llama_layer_forward_flops(batch=batch, seq=seq, hidden=hidden, ffn_hidden=ffn_hidden,
                                                 heads=heads, kv_heads=kv_heads)
    forward += 2 * batch * seq * hidden * vocab
    return (4 if recompute else 3) * forward


def gpt_train_flops(*, layers: int, batch: int, seq: int, hidden: int, heads: int, vocab: int,
                    kv_heads: int | None = None) -> float:
    """GPT layer (20 + 4/q)·b·s·h² + 4·b·s²·h, LM head 2·b·s·h·v, training 3x forward."""
    q = heads / (kv_heads or heads)
    b, s, h = batch, seq, hidden
    forward = layers * ((20 + 4 / q) * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * vocab
    return 3 * forward
