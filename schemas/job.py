"""Job lifecycle: lets workers know a job's shape up front and flush its state at the end."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal

from schemas.decoding import join, require

JobPhase = Literal["start", "end"]
ShapeOptimizer = Literal["adam", "sgd", "none"]
ShapeRecompute = Literal["none", "selective", "full"]
ShapeActivation = Literal["gelu", "relu", "swiglu"]
ShapeAttention = Literal["eager", "math", "flash"]
ShapeGradLifetime = Literal["keep", "before_forward", "before_backward", "fused"]
ShapeOptimizerImpl = Literal["for_loop", "foreach", "fused"]

# Upper bounds of a model shape's sizes: far above any model trained today, low enough that a
# product of them (bytes = seq·micro_batch·hidden·layers·...) stays a finite float.
MAX_SHAPE_DIM = 2**24  # layers, hidden, heads, kv_heads, ffn, micro_batch, microbatches, grad_accum
MAX_SHAPE_SEQ = 2**27  # sequence length (million-token contexts fit)
MAX_SHAPE_VOCAB = 2**27
MAX_SHAPE_PARAMS = 2**50  # parameter counts (a quadrillion)
ELEMENT_BYTES = (1, 2, 4, 8)  # fp8/int8, fp16/bf16, fp32, fp64


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    """The model's shape and numeric recipe at job `start` (contract 1.5): what the expected-memory model
    (`streams/model/memory.py`, seed 004's formulas) needs, so a rank's observed peak has an expectation.

    Every field is optional: the hook fills what it can read (the parameter count of a torch module; layers,
    hidden, heads, ... of a HuggingFace-style config) and the user passes the rest. Sizes are counts
    (`params`: total parameters, embeddings included; `ffn`: the FFN's inner width, default 4·hidden;
    `kv_heads`: grouped-query attention's K/V heads, default heads; `seq`, `micro_batch`: one micro-batch's
    tokens per sequence and sequences). Element sizes in bytes (1, 2, 4 or 8): `precision` an activation's
    (bf16/fp16 = 2), `param_bytes` a weight's and gradient's (default: precision; 4 under autocast),
    `state_bytes` an optimizer state's (fp32 Adam moments = 4). Layout beyond the `parallel` degrees:
    `sp` (Megatron sequence parallelism), `zero_stage` (0-3, ZeRO / FSDP) and `zero_degree` (ranks the
    states are sharded over, default dp; MindSpore's optimizer-parallel degree t), `grad_accum`
    (micro-batches per optimizer step), `microbatches` (per pipeline flush). The rest names the recipe:
    `optimizer`, `recompute`, `activation`, `attention`, `master_weights`, `dropout`, and the loop's
    `grad_lifetime` / `ddp_buckets` / `optimizer_impl` (see `streams.model.memory.Layout`).
    """

    params: int | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn: int | None = None
    seq: int | None = None
    micro_batch: int | None = None
    vocab: int | None = None
    precision: int | None = None
    param_bytes: int | None = None
    state_bytes: int | None = None
    optimizer: ShapeOptimizer | None = None
    master_weights: bool | None = None
    recompute: ShapeRecompute | None = None
    activation: ShapeActivation | None = None
    attention: ShapeAttention | None = None
    dropout: bool | None = None
    sp: bool | None = None
    zero_stage: int | None = None
    zero_degree: int | None = None
    grad_accum: int | None = None
    microbatches: int | None = None
    grad_lifetime: ShapeGradLifetime | None = None
    ddp_buckets: bool | None = None
    optimizer_impl: ShapeOptimizerImpl | None = None

    BOUNDS: ClassVar[dict[str, tuple[int, int]]] = {
        "params": (1, MAX_SHAPE_PARAMS), "layers": (1, MAX_SHAPE_DIM), "hidden": (1, MAX_SHAPE_DIM),
        "heads": (1, MAX_SHAPE_DIM), "kv_heads": (1, MAX_SHAPE_DIM), "ffn": (1, MAX_SHAPE_DIM),
        "seq": (1, MAX_SHAPE_SEQ), "micro_batch": (1, MAX_SHAPE_DIM), "vocab": (1, MAX_SHAPE_VOCAB),
        "zero_stage": (0, 3), "zero_degree": (1, 2**32 - 1), "grad_accum": (1, MAX_SHAPE_DIM),
        "microbatches": (1, MAX_SHAPE_DIM),
    }
    BYTE_FIELDS: ClassVar[tuple[str, ...]] = ("precision", "param_bytes", "state_bytes")

    def check(self, path: str) -> None:
        for name, (low, high) in self.BOUNDS.items():
            value = getattr(self, name)
            require(value is None or low <= value <= high, join(path, name), f"must be in [{low}, {high}]")
        for name in self.BYTE_FIELDS:
            value = getattr(self, name)
            require(value is None or value in ELEMENT_BYTES, join(path, name),
                    f"must be one of {', '.join(map(str, ELEMENT_BYTES))} bytes")
        if self.heads is not None and self.kv_heads is not None:
            require(self.kv_heads <= self.heads, join(path, "kv_heads"), "must be <= heads")

    def known(self) -> dict[str, int | bool | str]:
        """The fields that are set, by name (what the `jobs` table stores as JSON)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """Emitted once at job start and once at job end (topic steplens.jobs).

    parallel: domain sizes, e.g. {"dp": 8, "tp": 4, "pp": 2}.
    last_step: at `end`, the last step index every rank completed.
    kernel_summaries (contract 1.3): at `start`, whether every rank sends a `kernel_summary`
    per step. Detection then knows to await them even when a backlog delivers a job's step
    events long before its summaries (they travel on separate topics); None: not declared,
    learned from the summaries that arrive.
    attempt (contract 1.4): which launch of the job this is, 0 for the first; a relaunch under
    the same job id (after a crash, from a checkpoint, maybe with fewer hosts) counts up. The
    hook takes it from the launcher's restart count (TORCHELASTIC_RESTART_COUNT).
    model_shape (contract 1.5): at `start`, the model's shape and recipe (`ModelShape`), so the
    job's expected device memory per rank can be computed; None: not known.
    """

    TYPE: ClassVar[str] = "job"

    job: str
    phase: JobPhase
    world: int
    ts_ns: int
    parallel: dict[str, int] = field(default_factory=dict)
    last_step: int | None = None
    model: str | None = None
    kernel_summaries: bool | None = None
    attempt: int = 0
    model_shape: ModelShape | None = None

    def check(self, path: str) -> None:
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(self.world >= 1, join(path, "world"), "must be >= 1")
        require(self.last_step is None or self.last_step >= 0, join(path, "last_step"), "must be >= 0")
