"""What a rank runs in one step, derived from a Llama-style model, the hardware and the layout.

Kernels and FLOPs follow the spec's §1 formulas (F1 = 4·B·N·D·Sq·Sk, F2 = 2·B·M·N·K,
F4 = 4·B·S·Din·Dmid + 3·B·S·Dmid, B1 = 8·B·N·Sq·Sk·D, B2 = 2·B·M·N·K per gradient matmul),
collective sizes follow from activations and parameters, and collective times follow the
three-region latency curve of spec §5 on the link class the group runs over (intra-host
HCCS/NVLink or inter-host RDMA). Everything the simulator reports is a consequence of these
numbers, so a fault that slows one kernel kind moves exactly the metrics built on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from producers.simulator.topology import Topology
from schemas.bandwidth import bus_factor

# the contract's phases (schemas.columns.PHASES) the simulator models as a rank's busy time, in the order it
# sums them (exposed communication is the rest; it models no `grad` phase)
BUSY_PHASES = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "gc_ms", "interstep_cpu_ms")

IntArray = npt.NDArray[np.int64]

BF16 = 2


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A Llama-style decoder (GQA, SwiGLU FFN); `experts` > 0 makes the FFN a MoE (EP domain)."""

    name: str = "llama-7b-sim"
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 11008
    seq: int = 4096
    micro_batch: int = 1
    vocab: int = 32000
    microbatches: int = 8
    virtual_stages: int = 2  # interleaved 1F1B: the PP bubble is (pp - 1) / (microbatches · virtual_stages)
    experts: int = 0
    top_k: int = 2

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> float:
        h, f = self.hidden, self.ffn
        attn = h * (h + 2 * h * self.kv_heads // self.heads) + h * h
        ffn = 3 * h * f * max(1, self.experts)
        return self.layers * (attn + ffn) + 2 * self.vocab * h

    def model_flops_per_step(self, dp: int) -> float:
        """Training FLOPs of one step of the whole job (spec §1: 3 × forward, Llama layer formula)."""
        b, s, h, q = self.micro_batch, self.seq, self.hidden, self.heads / self.kv_heads
        fhat = self.ffn * (self.top_k if self.experts else 1)
        layer = (4 + 4 / q) * b * s * h * h + 4 * b * s * s * h + 6 * b * s * h * fhat
        forward = self.layers * layer + 2 * b * s * h * self.vocab
        return 3.0 * forward * self.microbatches * dp


@dataclass(frozen=True, slots=True)
class LinkClass:
    """One link class's collective latency curve (spec §5): constant t_s up to m1 bytes,
    a sigmoid transition up to m2, then t_s + m / bandwidth."""

    name: str
    bw_gbps: float  # bus bandwidth, GB/s
    t_s_us: float
    m1: float
    m2: float

    def time_ns(self, traffic_bytes: float) -> float:
        """Latency of moving `traffic_bytes` (already scaled by the collective's bus factor)."""
        m = max(traffic_bytes, 1.0)
        if m <= self.m1:
            weight = 0.0
        elif m >= self.m2:
            weight = 1.0
        else:
            x = (math.log(m) - math.log(self.m1)) / (math.log(self.m2) - math.log(self.m1))
            weight = 1.0 / (1.0 + math.exp(-12.0 * (x - 0.5)))
        return self.t_s_us * 1e3 + weight * m / self.bw_gbps


INTRA_HOST = LinkClass("intra", bw_gbps=150.0, t_s_us=8.0, m1=64e3, m2=32e6)  # HCCS/NVLink; saturates ≈ 32 MB
INTER_HOST = LinkClass("inter", bw_gbps=22.0, t_s_us=25.0, m1=256e3, m2=64e6)  # 200 Gb/s RoCE per device
# NCCL/HCCL's socket transport over the same hosts (RDMA unusable: NCCL_IB_DISABLE, a wrong NCCL_SOCKET_IFNAME
# picking the management NIC): kernel TCP stacks, copies through host memory, a few streams per peer. Per device
# ~7 GB/s of bus bandwidth (a third of RoCE's) and a start-up latency of tens of µs more per call
TCP_SOCKETS = LinkClass("tcp", bw_gbps=7.0, t_s_us=80.0, m1=512e3, m2=128e6)


@dataclass(frozen=True, slots=True)
class Hardware:
    """Device figures: peak dense BF16, per-kind kernel efficiency, copy and launch figures."""

    device_kind: str = "ascend-910b"
    peak_flops: float = 313e12
    matmul_eff: float = 0.72
    attn_eff: float = 0.55
    ffn_eff: float = 0.62
    h2d_gbps: float = 20.0
    d2h_gbps: float = 18.0
    launch_us: float = 14.0
    launch_mad_us: float = 1.5
    idle_w: float = 90.0
    max_w: float = 400.0
    ambient_c: float = 35.0
    c_per_w: float = 0.11
    freq_mhz: float = 1800.0  # the devices' sustained AI Core / SM clock (what device samples report)
    rated_mhz: float = 1800.0  # the clock `peak_flops` is rated at: compute-bound kernels run at freq / rated of it
    intra: LinkClass = INTRA_HOST
    inter: LinkClass = INTER_HOST


@dataclass(frozen=True, slots=True)
class KernelKind:
    """One monitored aggregate of a rank's step (a kernel_summary entry), healthy figures.

    count/flops/bytes are per rank-step arrays (stages differ: the last holds the LM head);
    call_ns is one call's device time; phase says which step phase the kernel belongs to.
    """

    key: str
    cat: str
    metric: str
    phase: str  # forward, backward, optimizer, data, comm
    count: IntArray
    call_ns: float
    flops: float = 0.0  # per call
    bytes: float = 0.0  # per call
    shape: dict[str, int] | None = None
    op: str | None = None
    domain: str | None = None
    group_size: int | None = None
    direction: str | None = None
    link: str | None = None  # link class name for collectives


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Every kernel kind of a step for every rank, plus the figures the timing model needs."""

    kinds: list[KernelKind]
    model_flops_per_rank: float  # MFU numerator per rank-step
    other_ns: float  # unmonitored (minority) kernels per rank-step
    other_count: int
    kind_index: dict[str, int] = field(default_factory=dict)

    def indices(self, *, metric: str | None = None, phase: str | None = None, domain: str | None = None,
                cat: str | None = None) -> list[int]:
        return [i for i, k in enumerate(self.kinds)
                if (metric is None or k.metric == metric) and (phase is None or k.phase == phase)
                and (domain is None or k.domain == domain) and (cat is None or k.cat == cat)]


def _matmul(m: int, n: int, k: int) -> tuple[str, dict[str, int], float]:
    return f"{m}x{n}x{k}", {"B": 1, "M": m, "N": n, "K": k}, 2.0 * m * n * k


def build_plan(model: ModelConfig, topo: Topology, hw: Hardware) -> StepPlan:
    """The kernel kinds of one training step on every rank (arrays over ranks where stages differ)."""
    world = topo.world
    stage = topo.coord_arrays["pp"]
    tp, cp, mb = topo.tp, topo.cp, model.microbatches
    b, h, d = model.micro_batch, model.hidden, model.head_dim
    s = model.seq // cp
    lps = model.layers // topo.pp
    calls = lps * mb  # per layer-kind per step
    ones = np.full(world, calls, dtype=np.int64)
    kinds: list[KernelKind] = []

    def compute(metric: str, phase: str, tag: str, shape: dict[str, int], flops: float, eff: float,
                count: IntArray) -> None:
        kinds.append(KernelKind(key=f"{metric}:{tag}", cat="compute", metric=metric, phase=phase, count=count,
                                call_ns=flops / (hw.peak_flops * eff * (hw.freq_mhz / hw.rated_mhz)) * 1e9,
                                flops=flops, shape=shape))

    heads = max(1, model.heads // tp)
    kv = model.kv_heads * h // model.heads
    fa_shape = {"B": b, "N": heads, "D": d, "Sq": s, "Sk": model.seq}
    fa_tag = "x".join(str(v) for v in fa_shape.values())
    compute("F1", "forward", fa_tag, fa_shape, 4.0 * b * heads * d * s * model.seq, hw.attn_eff, ones)
    compute("B1", "backward", fa_tag, fa_shape, 8.0 * b * heads * s * model.seq * d, hw.attn_eff, ones)
    matmuls = [_matmul(b * s, (h + 2 * kv) // tp, h), _matmul(b * s, h, h // tp)]
    if not model.experts:
        matmuls += [_matmul(b * s, 2 * model.ffn // tp, h), _matmul(b * s, h, model.ffn // tp)]
    for tag, shape, flops in matmuls:
        compute("F2", "forward", tag, shape, flops, hw.matmul_eff, ones)
        compute("B2", "backward", tag, shape, flops, hw.matmul_eff, 2 * ones)  # dgrad + wgrad
    if model.experts:
        tokens = b * s * model.top_k
        shape = {"B": 1, "S": tokens, "Din": h, "Dmid": model.ffn // tp}
        flops = 4.0 * tokens * h * (model.ffn // tp) + 3.0 * tokens * (model.ffn // tp)
        tag = "x".join(str(v) for v in shape.values())
        compute("F4", "forward", tag, shape, flops, hw.ffn_eff, ones)
        compute("B3", "backward", tag, shape, 2 * flops, hw.ffn_eff, ones)
    last = (stage == topo.pp - 1).astype(np.int64) * mb
    tag, shape, flops = _matmul(b * s, model.vocab // tp, h)
    compute("F2", "forward", tag, shape, flops, hw.matmul_eff, last)
    compute("B2", "backward", tag, shape, flops, hw.matmul_eff, 2 * last)

    def collective(op: str, metric: str, domain: str, phase: str, nbytes: float, count: IntArray) -> None:
        n = topo.domain_size(domain)
        if n <= 1:
            return
        link = hw.inter if topo.spans_hosts(domain) else hw.intra
        t = link.time_ns(nbytes * bus_factor(op, n))
        kinds.append(KernelKind(key=f"{op}/{domain}", cat="comm", metric=metric, phase=phase, count=count,
                                call_ns=t, bytes=nbytes, op=op, domain=domain, group_size=n, link=link.name))

    act = float(b * s * h * BF16)
    collective("allreduce", "G1", "tp", "forward", act, 4 * ones)  # 2 forward + 2 backward per layer
    if model.experts and topo.ep > 1:
        collective("alltoall", "G5", "ep", "forward", act * model.top_k, 4 * ones)
    if cp > 1:
        collective("allgather", "G3", "cp", "forward", 2.0 * b * s * kv * BF16, 2 * ones)
    if topo.pp > 1:
        ends = np.where((stage == 0) | (stage == topo.pp - 1), mb, 2 * mb).astype(np.int64)
        collective("send", "G2", "pp", "comm", act, ends)
        collective("recv", "G2", "pp", "comm", act, ends)
    buckets = 4
    grad_bytes = model.params / (tp * topo.pp) * BF16 / max(1, topo.ep if model.experts else 1)
    collective("allreduce", "G1", "dp", "comm", grad_bytes / buckets, np.full(world, buckets, dtype=np.int64))
    tokens_bytes = float(b * model.seq * 8)
    kinds.append(KernelKind(key="h2d", cat="memcpy", metric="T9", phase="data", count=np.full(world, mb, np.int64),
                            call_ns=tokens_bytes * 2 / hw.h2d_gbps + 8e3, bytes=tokens_bytes * 2, direction="h2d"))
    kinds.append(KernelKind(key="d2h", cat="memcpy", metric="T9", phase="optimizer",
                            count=np.full(world, 2, np.int64), call_ns=12e3, bytes=4096.0, direction="d2h"))
    per_rank = model.model_flops_per_step(topo.dp) / world
    compute_ns = sum(float(k.count.max()) * k.call_ns for k in kinds if k.cat == "compute")
    plan = StepPlan(kinds=kinds, model_flops_per_rank=per_rank, other_ns=0.08 * compute_ns, other_count=40 * calls)
    plan.kind_index.update({k.key: i for i, k in enumerate(kinds)})
    return plan
