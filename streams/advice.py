"""Every piece of advice detection gives, in one place: cause and suggestion per rule, per scope
and per cause.

- `advise(phase)`: the phase a slow step or slow rank grew in (Hermes' advisor table, spec §3);
- `RULES`: the rule-only findings R1–R10 (`signals/`);
- `SCOPES`: the scopes whose advice does not depend on a phase (hang, stall, slow link, job
  stopped, split group, slow PP stage);
- `CAUSES`: the causes a profile analysis names (Hermes Table 4, `streams/profiles/analysis/`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Advice:
    cause: str
    suggestion: str


_ADVICE: dict[str, Advice] = {
    "gc_ms": Advice(
        "Python garbage-collection pauses",
        "raise gc.set_threshold, or gc.disable() with a periodic gc.collect() between steps",
    ),
    "data_ms": Advice(
        "slow data loading",
        "more DataLoader workers, pin_memory and prefetch; local instead of remote storage",
    ),
    "interstep_cpu_ms": Advice(
        "CPU work between steps",
        "move logging/checkpointing off the step boundary; remove sync ops such as tensor.item()",
    ),
    "comm_exposed_ms": Advice(
        "exposed (non-overlapped) communication",
        "gradient bucketing/fusion and comm-compute overlap; check link health (R5/R6)",
    ),
    "comm_volume": Advice(
        "collective traffic grew (uncompressed or fp32 gradients, a changed bucket or sharding config)",
        "compress gradients (bf16/fp16 all-reduce, a PowerSGD-style hook) or restore the previous "
        "gradient dtype, bucket and sharding configuration",
    ),
    "comm_bandwidth": Advice(
        "collective bandwidth fell on every group at the same traffic (fabric-wide)",
        "check the fabric: RDMA retransmission, switch/NIC configuration, congestion control, HCCL/NCCL "
        "environment variables",
    ),
    "comm_stall": Advice(
        "the whole job held up inside a collective for a step, same traffic, no phase grown (a timing conflict)",
        "take a timeline of the stalled steps and look for what the collective waits on: a host-side sync, "
        "a checkpoint or storage call, another job on the fabric",
    ),
    "rhythm_slower": Advice(
        "the job's periodic work (a checkpoint, an evaluation pass) became much slower than its own past",
        "check the checkpoint's storage (free space, throughput, a throttled object store) and the save's "
        "configuration (asynchronous save, shard size); for an evaluation pass, its data set and batch size",
    ),
    "optimizer_ms": Advice(
        "slow optimizer step",
        "fused/foreach optimizer kernels; check for host-device syncs in the optimizer",
    ),
}

_COMPUTE = Advice(
    "slow compute on the device",
    "check the device for down-clocking or thermal throttling and the host for foreign "
    "processes (CPU contention); isolate the node if it persists",
)

COMPUTE_PHASES = ("forward_ms", "backward_ms", "grad_ms")


def advise(phase: str | None) -> Advice:
    """Advice for the phase that explains the slowdown (compute phases share one entry)."""
    if phase is None:
        return UNKNOWN
    return _ADVICE.get(phase, _COMPUTE)


UNKNOWN = Advice("unknown", "enable detailed profiling for the affected ranks and steps")

# rule-only findings (streams/detect/signals/)
RULES: dict[str, Advice] = {
    "R1": Advice("device metric outside its bounds", "check cooling, power and memory headroom of the device"),
    "R2": Advice("slow drift of a device metric", "check cooling/power trends; plan maintenance of the device"),
    "R3": Advice("throughput dropped below its recent window", "check the data pipeline (D1) and the slow-step cause"),
    "R4": Advice("kernel efficiency off its benchmark", "check down-clocking and thermal throttling; isolate slow "
                 "nodes; for memory-bound kernels: fusion, quantisation"),
    "R5": Advice("slow link: collective bandwidth of a rank off its group", "check the NIC/link (RDMA "
                 "retransmission, port flapping); fix switch/NIC config"),
    "R6": Advice("slow group: a whole group's collective bandwidth is low", "check the group's links and placement; "
                 "HCCL/NCCL env vars, congestion control"),
    "R7": Advice("minority (unmonitored) kernels take a large share", "profile the step; fuse or remove small kernels"),
    "R8": Advice("non-uniform kernel launch latency (host dispatch)",
                 "operator fusion, remove sync ops; static shapes"),
    "R9": Advice("host-device copy rate outside its band", "pin_memory and prefetch; check PCIe/host memory bandwidth"),
    "R10": Advice("CPU work between steps", "move logging/checkpointing off the step boundary; remove sync ops"),
    "OOM": Advice("device memory grows step after step (a leak: tensors kept across steps, a growing cache or "
                  "history) and will reach the device's capacity: the job will crash out of memory and restart "
                  "from its last checkpoint",
                  "checkpoint now; then find the leak (torch.cuda.memory_snapshot / memory_summary, tensors kept "
                  "in lists, loss or metrics kept with their graph: .item() or .detach()); to buy time lower the "
                  "micro-batch or enable recompute (activation checkpointing)"),
}

# scopes whose advice does not depend on a phase (streams/detect/scopes/)
SCOPES: dict[str, Advice] = {
    "HUNG": Advice("no progress: the process is stuck (deadlock, failed collective, dead host or NIC)",
                   "inspect the stack of the hung ranks (py-spy dump), check the NIC/link and the host; restart "
                   "from checkpoint"),
    "SLOW_LINK": Advice("network: a degraded or flapping link (retransmissions, a bad port, a down-trained NIC)",
                        "check the host's NIC and switch port (error counters, link speed), RDMA/HCCL settings; "
                        "drain the host"),
    "JOB_STOPPED": Advice("the job's processes stopped (crash, OOM kill, preemption, node failure) or its "
                          "telemetry path is cut",
                          "check the launcher and scheduler logs for the exit reason; relaunch from the last "
                          "checkpoint"),
    "SLOW_GROUP": Advice("load imbalance inside one group: some members work far longer while the others wait "
                         "(MoE expert routing imbalance, uneven sharding)",
                         "rebalance the group's work (expert capacity factor / auxiliary load-balancing loss, "
                         "even sharding); profile the hot ranks"),
    "SLOW_STAGE": Advice("one pipeline stage got slower (its layers, its devices or its inputs)",
                         "profile the stage's ranks; rebalance layers across stages if it persists"),
    # below what the fleet achieves from the job's start (scopes/expected.py): cause "network" / "compute"
    "BELOW_EXPECTED_NETWORK": Advice(
        "network: collectives far below the fleet's bandwidth on this link class from the start (a TCP socket "
        "fallback instead of RDMA, a wrong interface, a down-trained NIC)",
        "check NCCL_SOCKET_IFNAME / NCCL_IB_DISABLE / NCCL_IB_HCA (HCCL_SOCKET_IFNAME, HCCL_INTRA_ROCE_ENABLE on "
        "Ascend) and the NIC (ibstat, link speed, RDMA counters); the NCCL/HCCL init log names the transport"),
    "BELOW_EXPECTED_COMPUTE": Advice(
        "compute: kernels below the fleet's FLOP/s on this device kind from the start (down-clocked devices, "
        "a power cap, thermal throttling, an old driver or firmware)",
        "check the clocks and power limit (nvidia-smi -q -d CLOCK,POWER / npu-smi info), thermals and the "
        "driver/firmware version against the fleet's; reset application clocks"),
}


def advise_rule(rule: str) -> Advice:
    """Advice for a rule-only finding (R1–R10)."""
    return RULES.get(rule, UNKNOWN)


# Hermes Table 4, keyed by the cause a profile analysis names (streams/profiles/analysis/*).
CAUSES: dict[str, Advice] = {
    "poor_parallelism": Advice("low compute/communication overlap (parallelism bottleneck)",
                               "automatic hybrid parallelism or multi-shard parallel; overlap gradient communication"),
    "slow_reading": Advice("slow data reading", "more I/O bandwidth, local instead of remote storage, more workers"),
    "slow_processing": Advice("slow data processing", "avoid zip/tar inputs, remove taskset CPU binding"),
    "slow_fetching": Advice("slow host-to-device fetching", "pin_memory and prefetch"),
    "compilation": Advice("operator compilation (dynamic shapes)", "static shapes, or disable JIT compilation"),
    "dispatch": Advice("host dispatch of many small operators", "operator fusion; remove sync ops such as .item()"),
    "sync_ops": Advice("synchronising host calls (.item(), synchronize)",
                       "remove host-device sync ops from the step (.item(), .cpu(), torch.cuda.synchronize)"),
    "gc": Advice("Python garbage-collection pauses",
                 "raise gc.set_threshold, or gc.disable() with a periodic gc.collect() between steps"),
    "contention": Advice("CPU contention from another process", "stop or move the foreign process"),
    "environment": Advice("environment configuration", "align library versions, lower the log level"),
    "compute_bound": Advice("compute-bound kernels", "avoid down-clocking, isolate slow nodes"),
    "memory_bound": Advice("memory-bound kernels", "operator fusion, quantisation, ZeRO"),
    "under_utilised": Advice("under-utilised device (neither compute nor memory bound)",
                             "remove AICPU operators, use affinity APIs, avoid private formats"),
    "down_clocking": Advice("device down-clocking", "check power and cooling; isolate the node if it persists"),
    "bandwidth_contention": Advice("communication bandwidth contention with concurrent compute",
                                   "reschedule operators so collectives do not compete with memory-heavy compute"),
    "retransmission": Advice("RDMA retransmission (a transfer over 4 s)", "fix the switch/NIC RDMA configuration"),
    "small_packets": Advice("small communication packets", "larger batch, gradient fusion (bucketing)"),
    "alignment": Advice("messages not aligned to 512 B", "pad communication buffers to multiples of 512 B"),
    "network_config": Advice("network configuration", "HCCL/NCCL env vars, congestion control, UDP hash collisions"),
    "slow_rank": Advice("a late rank holds the collective back",
                        "profile the late rank's host (CPU contention, data loading) and device (down-clocking)"),
    "exposed_communication": Advice("exposed (non-overlapped) communication",
                                    "gradient bucketing/fusion and comm-compute overlap; check link health"),
    "fragmentation": Advice("fragmentation of the caching allocator: it reserves ever more device memory than the "
                            "step allocates (free blocks too small or split for the next request) and will fail "
                            "an allocation it holds enough memory for",
                            "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb); steadier "
                            "tensor shapes (bucket the sequence lengths); torch.cuda.empty_cache() at a step "
                            "boundary buys time"),
}


def advise_cause(cause: str) -> Advice:
    """Advice for a profile-analysis cause; unknown causes ask for a closer look rather than guess."""
    return CAUSES.get(cause, Advice(cause, "inspect the profile around the evidence given"))
