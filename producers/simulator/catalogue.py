"""The fault catalogue: every row of spec §4, the three Hermes cases, and the fleet faults.

A `FaultSpec` says what (kind), where (scope + members), when (start/end step), how much
(magnitude, from the spec's "what it looks like" column) and which rule ids a detector is
expected to raise. Its effect is one function of the kind over the step's `Effects`; the
timing model in fleet.py turns that into waits, step times, kernel aggregates and device
samples. A `Scenario` builds the faults of one benchmark run for a topology. Ground truth is
one JSON line per fault (`FaultSpec.to_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from producers.simulator.conditions import DEVICE_MEM_GB, leak_pct
from producers.simulator.model import ModelConfig
from producers.simulator.topology import Topology
from schemas.bandwidth import bus_factor

if TYPE_CHECKING:
    from producers.simulator.fleet import Effects, FleetJob, Noise
    from producers.simulator.traits import Traits

ScopeType = Literal["rank", "host", "group", "link", "stage", "job"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultSpec:
    """One injected fault, as the ground truth records it."""

    kind: str
    scope: ScopeType
    start: int
    end: int | None = None  # inclusive; None = to the end of the run
    ranks: tuple[int, ...] = ()  # every rank the fault touches directly
    hosts: tuple[str, ...] = ()
    domain: str | None = None  # group scope: which domain
    group: int | None = None
    links: tuple[str, ...] = ()  # link scope: "node-3/rdma"
    stage: int | None = None
    magnitude: dict[str, float] = field(default_factory=dict)
    rules: tuple[str, ...] = ()
    row: str = ""
    attempt: int = 0  # the job's launch it happens in (contract 1.4): a relaunch re-runs step numbers

    def covers(self, step: int) -> bool:
        return step >= self.start and (self.end is None or step <= self.end)

    def last_step(self, total_steps: int) -> int:
        return total_steps - 1 if self.end is None else min(self.end, total_steps - 1)

    def check(self, job: FleetJob) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        for r in self.ranks:
            if not 0 <= r < job.world:
                raise ValueError(f"fault rank {r} outside world of {job.world}")
        if self.start < 0 or (self.end is not None and self.end < self.start):
            raise ValueError("need 0 <= start <= end")

    def apply(self, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
        KINDS[self.kind](self, step, fx, job, rng)

    def to_dict(self, job: str = "", seed: int = 0, total_steps: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job": job, "seed": seed, "kind": self.kind, "scope": self.scope, "start_step": self.start,
            "end_step": self.end if total_steps is None else self.last_step(total_steps),
            "ranks": list(self.ranks), "hosts": list(self.hosts), "domain": self.domain, "group": self.group,
            "links": list(self.links), "stage": self.stage, "magnitude": self.magnitude, "rules": list(self.rules),
            "row": self.row, "attempt": self.attempt,
        }
        return out


Apply = Callable[[FaultSpec, int, "Effects", "FleetJob", np.random.Generator], None]
KINDS: dict[str, Apply] = {}


def kind(name: str) -> Callable[[Apply], Apply]:
    def register(fn: Apply) -> Apply:
        KINDS[name] = fn
        return fn
    return register


def _r(f: FaultSpec) -> list[int]:
    return list(f.ranks)


def _compute(fx: Effects, job: FleetJob, ranks: list[int], factor: float, metrics: tuple[str, ...] = ()) -> None:
    for i, k in enumerate(job.plan.kinds):
        if k.cat == "compute" and (not metrics or k.metric in metrics):
            fx.kernel_mul[i, ranks] *= factor


def _kinds(job: FleetJob, **match: str) -> list[int]:
    return job.plan.indices(**match)


def _m(f: FaultSpec, key: str, default: float) -> float:
    return float(f.magnitude.get(key, default))


# --- hardware ------------------------------------------------------------------------------
@kind("unstable_power")
def _unstable_power(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    period = _m(f, "period_steps", 8)
    wave = math.sin(2 * math.pi * (step - f.start) / period)
    fx.power_mul[_r(f)] *= 1.0 + _m(f, "power_swing", 0.15) * wave
    if wave < -0.3:  # brown-out: the devices throttle
        _compute(fx, job, _r(f), _m(f, "throttle", 1.45))
        fx.freq_mul[_r(f)] *= 0.7


@kind("cooling_loss")
def _cooling_loss(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.temp_add[_r(f)] += _m(f, "temp_add_c", 42.0) + 0.3 * (step - f.start)  # ≥ 85 °C and rising
    _compute(fx, job, _r(f), 1.0 / (1.0 - _m(f, "compute_cut", 0.25)))
    fx.freq_mul[_r(f)] *= 1.0 - _m(f, "compute_cut", 0.25)


@kind("chip_degradation")
def _chip_degradation(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    _compute(fx, job, _r(f), _m(f, "matmul_factor", 1.5), ("F2", "B2", "F3", "B3"))
    _compute(fx, job, _r(f), _m(f, "matmul_factor", 1.5), ("F1", "B1", "F4"))
    fx.power_mul[_r(f)] *= 0.85
    # spec §4 "peak FLOP/s < 70 % of benchmark": peak FLOP/s is units x clock x FLOP/cycle, and the
    # always-on trace of a chip that lost its peak is its clock (npu-smi aicorefreq / NVML SM clock):
    # spec §3 "check down-clocking (> 5 %)" for a compute-bound slowdown
    fx.freq_mul[_r(f)] *= 1.0 / _m(f, "matmul_factor", 1.5)


@kind("memory_bottleneck")
def _memory_bottleneck(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.membw_mul[_r(f)] *= _m(f, "membw_factor", 0.6)
    for i in _kinds(job, cat="memcpy"):
        fx.kernel_mul[i, _r(f)] *= 1.0 / (1.0 - _m(f, "copy_rate_cut", 0.6))
    _compute(fx, job, _r(f), 1.12)


@kind("link_degradation")
def _link_degradation(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    for domain in ("dp", "pp", "ep", "cp"):
        if domain in job.topology.group_ids and job.topology.spans_hosts(domain):
            fx.comm(domain, _r(f), _m(f, "comm_factor", 2.0))


@kind("flapping_link")
def _flapping_link(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    """Down for `flap_steps` steps every `every_steps` (default: on/off, as many up as down)."""
    flap = int(_m(f, "flap_steps", 3))
    if (step - f.start) % int(_m(f, "every_steps", 2 * flap)) < flap:
        _link_degradation(f, step, fx, job, rng)


@kind("bad_links")
def _bad_links(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    dph = job.topology.devices_per_host
    for host in f.hosts:
        if rng.random() < _m(f, "flap_p", 0.6):
            first = int(host.split("-")[1]) * dph
            ranks = list(range(first, first + dph))
            for domain in ("dp", "pp"):
                if job.topology.spans_hosts(domain):
                    fx.comm(domain, ranks, float(rng.uniform(1.5, _m(f, "comm_factor_max", 4.0))))


# --- code ----------------------------------------------------------------------------------
@kind("slow_attention")
def _slow_attention(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    _compute(fx, job, _r(f), 1.0 / _m(f, "fa_fraction", 0.4), ("F1", "B1"))


@kind("redundant_grad")
def _redundant_grad(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    for i in _kinds(job, phase="backward", cat="compute"):
        fx.count_mul[i, _r(f)] *= _m(f, "backward_factor", 2.0)


@kind("memory_mismanagement")
def _memory_mismanagement(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.mem_add[_r(f)] += _m(f, "mem_add_pct", 24.0)
    for i in _kinds(job, cat="memcpy"):
        fx.kernel_mul[i, _r(f)] *= _m(f, "copy_factor", 3.0)
    fx.add("optimizer_ms", _r(f), _m(f, "malloc_retry_ms", 60.0))


@kind("gc_leak")
def _gc_leak(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.mem_add[_r(f)] += _m(f, "mem_pct_per_100_steps", 10.0) * (step - f.start) / 100.0
    if (step - f.start) % int(_m(f, "every_steps", 3)) == 0:
        fx.add("gc_ms", _r(f), _m(f, "pause_ms", 650.0))
        fx.gc_count_add[_r(f)] += 1




@kind("memory_leak")
def _memory_leak(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # tensors kept across steps (a loss kept with its graph, a growing cache): the rank's allocations grow
    # by the same bytes every step until they reach the device's capacity, where an allocation fails and the
    # rank dies out of memory (FleetJob.oom_step: the job's processes stop there)
    fx.mem_add[_r(f)] += leak_pct(f) * (step - f.start)


FRAG_SEGMENT_STEPS = 4  # a fragmenting cache strands a segment every few steps, not a sliver every step


@kind("allocator_fragmentation")
def _allocator_fragmentation(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # varying tensor shapes (unbucketed sequence lengths) leave the caching allocator's free blocks too small
    # or split for the next request: it reserves a new segment every few steps and never reuses the old,
    # while the step's allocations stay as they were. Reserved reaches capacity and an allocation fails with
    # "reserved but unallocated memory is large" (FleetJob.oom_step: the job's processes stop there)
    k = FRAG_SEGMENT_STEPS
    fx.frag_add[_r(f)] += leak_pct(f) * k * ((step - f.start) // k)


@kind("moe_imbalance")
def _moe_imbalance(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    ranks = _r(f)
    hot, cold = ranks[: max(1, len(ranks) // 2)], ranks[max(1, len(ranks) // 2):]
    swing = _m(f, "ffn_swing", 0.4)
    _compute(fx, job, hot, 1.0 / (1.0 - swing), ("F4", "B3"))
    _compute(fx, job, cold, 1.0 / (1.0 + swing), ("F4", "B3"))
    fx.aicore_set[hot] = 100.0
    fx.aicore_set[cold] = 18.0


@kind("compile_defect")
def _compile_defect(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # spec §4 ties this fault to R8 (CU < 0.7): only the launches that hit a recompilation are slow,
    # so latency turns bimodal: a share p at X, the rest at the nominal b, mean = target;
    # the mean absolute deviation of that mix is 2p(1-p)(X - b) (scaling every launch alike would keep CU)
    b, target, p = job.hardware.launch_us, _m(f, "launch_us", 120.0), _m(f, "recompile_share", 0.3)
    slow = (target - (1.0 - p) * b) / p
    fx.launch_mul[_r(f)] *= target / b
    fx.launch_mad_mul[_r(f)] *= 2.0 * p * (1.0 - p) * (slow - b) / job.hardware.launch_mad_us
    _compute(fx, job, _r(f), 1.08)


# --- data ----------------------------------------------------------------------------------
@kind("bad_data_format")
def _bad_data_format(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.mul("data_ms", _r(f), _m(f, "batch_latency_factor", 1.8))
    for i in _kinds(job, cat="memcpy"):
        if job.plan.kinds[i].direction == "h2d":
            fx.kernel_mul[i, _r(f)] *= 1.0 / (1.0 - _m(f, "h2d_cut", 0.4))


@kind("interstep_cpu")
def _interstep_cpu(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    share = _m(f, "interstep_share", 0.55)  # of the new step: x / (nominal + x) = share
    fx.add("interstep_cpu_ms", _r(f), share / (1.0 - share) * job.nominal_ms)
    fx.cpu_add[_r(f)] += 50.0


@kind("bad_batch_size")
def _bad_batch_size(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.mem_add[_r(f)] += _m(f, "mem_add_pct", 26.0)
    fx.aicore_cap[_r(f)] = np.minimum(fx.aicore_cap[_r(f)], _m(f, "aicore_cap_pct", 48.0))
    _compute(fx, job, _r(f), 1.3)


@kind("cache_failure")
def _cache_failure(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    swing = _m(f, "throughput_swing", 0.25)
    fx.mul("data_ms", _r(f), 1.0 / (1.0 + swing * (1 if (step - f.start) % 2 else -1)))
    fx.add("data_ms", _r(f), _m(f, "refetch_ms", 0.0))


# --- deployment ----------------------------------------------------------------------------
@kind("unbalanced_scheduling")
def _unbalanced_scheduling(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    ranks = _r(f)
    busy, starved = ranks[: len(ranks) // 2], ranks[len(ranks) // 2:]
    fx.aicore_set[busy] = 100.0
    fx.aicore_set[starved] = _m(f, "starved_pct", 28.0)
    fx.launch_mad_mul[starved] *= 6.0
    _compute(fx, job, starved, 1.3)


@kind("wrong_dp_topology")
def _wrong_dp_topology(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    i = job.plan.kind_index["allreduce/dp"]
    spread = _m(f, "latency_spread", 3.5)
    ranks = _r(f)
    fx.kernel_mul[i, ranks] *= np.linspace(1.0, spread, len(ranks))
    fx.comm("dp", ranks, spread)


@kind("early_stream_sync")
def _early_stream_sync(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.add("optimizer_ms", _r(f), _m(f, "sync_ms", 650.0))


@kind("uncompressed_gradients")
def _uncompressed_gradients(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    i = job.plan.kind_index["allreduce/dp"]
    k = job.plan.kinds[i]
    factor = _m(f, "grad_bytes_factor", 8.0)
    link = job.hardware.inter if k.link == "inter" else job.hardware.intra
    traffic = k.bytes * bus_factor("allreduce", k.group_size or 1)
    fx.bytes_mul[i, _r(f)] *= factor
    fx.kernel_mul[i, _r(f)] *= link.time_ns(traffic * factor) / link.time_ns(traffic)  # the link saturates


@kind("cpu_device_mismatch")
def _cpu_device_mismatch(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.launch_mad_mul[_r(f)] *= _m(f, "launch_mad_factor", 4.0)
    fx.cpu_add[_r(f)] += 70.0
    for i in _kinds(job, cat="memcpy"):
        if job.plan.kinds[i].direction == "h2d":
            nominal_ns = float(job.plan.kinds[i].count.max()) * job.plan.kinds[i].call_ns
            target = _m(f, "memcpy_share", 0.35) / (1 - _m(f, "memcpy_share", 0.35)) * job.nominal_ms * 1e6
            fx.kernel_mul[i, _r(f)] *= target / nominal_ns


@kind("minority_kernels")
def _minority_kernels(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.other_add_ms[_r(f)] += (_m(f, "step_growth", 0.2) + 0.36) * job.nominal_ms  # net of the faster compute
    for i in _kinds(job, cat="compute"):
        fx.kernel_mul[i, _r(f)] *= 0.55  # the monitored kernels run faster (e.g. fused); the rest got slow


@kind("timing_conflict")
def _timing_conflict(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    if (step - f.start) % int(_m(f, "every_steps", 7)) == 0:
        fx.stall_ms += float(rng.uniform(_m(f, "stall_min_ms", 1000.0), _m(f, "stall_max_ms", 3000.0)))


# --- Hermes cases and fleet faults ---------------------------------------------------------
@kind("gc_storm")
def _gc_storm(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    if "step_p" in f.magnitude:  # a scattered storm: some steps, a few random ranks each (one problem, job-wide)
        if rng.random() >= f.magnitude["step_p"]:
            return
        ranks = rng.choice(job.world, size=int(_m(f, "ranks_per_hit", 1)), replace=False)
        fx.add("gc_ms", ranks, rng.uniform(_m(f, "pause_min_ms", 300.0), _m(f, "pause_max_ms", 800.0), len(ranks)))
        fx.gc_count_add[ranks] += 1
        return
    hit = rng.random(job.world) < _m(f, "rank_p", 0.25)
    fx.add("gc_ms", np.flatnonzero(hit), rng.gamma(4.0, _m(f, "pause_ms", 700.0) / 4.0, job.world)[hit])
    fx.gc_count_add[hit] += 1


@kind("foreign_process")
def _foreign_process(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    ranks = _r(f)
    fx.cpu_add[ranks] += 40.0
    fx.add("interstep_cpu_ms", ranks, 0.05 * job.nominal_ms)
    worst = int(f.magnitude.get("worst_rank", ranks[0]))
    _compute(fx, job, [worst], 1.12)
    if rng.random() < _m(f, "spike_p", 0.15):
        fx.add("interstep_cpu_ms", [worst], _m(f, "spike_factor", 5.8) * job.nominal_ms)


@kind("hung_rank")
def _hung(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.halted = True
    fx.silent[_r(f)] = True


@kind("dead_host")
def _dead_host(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    fx.halted = True
    fx.silent[_r(f)] = True
    fx.device_silent[_r(f)] = True


@kind("job_crash")
def _job_crash(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # every process of the launch is gone from `start` on: FleetJob.iter_frames stops before this step,
    # so nothing is applied; its magnitude says what the launcher does next (producers.simulator.attempts)
    fx.halted = True


@kind("slow_data_loader")
def _slow_data_loader(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # one rank's input pipeline is slow (a starved DataLoader worker, a slow disk): it reaches its first
    # collective late every step, and its peers wait for it in theirs; its own kernels are all fine.
    # `data_add_share` of the nominal step, or `data_add_ms` when given (a hand-placed stall, `data_stalls`);
    # on every rank of the job it is a job-wide data stall (a slow step)
    share = _m(f, "data_add_share", 0.3)
    extra = f.magnitude["data_add_ms"] if "data_add_ms" in f.magnitude else share * job.nominal_ms
    fx.add("data_ms", _r(f), extra)


@kind("slow_bursts")
def _slow_bursts(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    # an intermittently slow device (a marginal chip, thermal cycling): compute slow for `burst_steps`
    # steps every `every_steps`, healthy in between
    if (step - f.start) % int(_m(f, "every_steps", 25)) < int(_m(f, "burst_steps", 5)):
        _compute(fx, job, _r(f), _m(f, "compute_factor", 1.3))


@kind("slow_compute")
def _slow_compute(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    _compute(fx, job, _r(f), _m(f, "compute_factor", 1.3))


# --- hand-placed faults (the demo, tests, the chaos and soak benches) ----------------------
def straggler(topo: Topology, rank: int, factor: float, start: int = 0, end: int | None = None, *,
              attempt: int = 0) -> FaultSpec:
    """One slow rank (`slow_compute`): its compute kernels take `factor` times longer on steps
    [start, end] (end None: to the end), so every collective it is in waits for it."""
    if factor <= 0:
        raise ValueError("factor must be > 0")
    return FaultSpec(kind="slow_compute", scope="rank", start=start, end=end, ranks=(rank,),
                     hosts=(f"node-{rank // topo.devices_per_host}",), magnitude={"compute_factor": factor},
                     rules=("SLOW_RANK", "R4"), row="slow rank", attempt=attempt)


def _runs(steps: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted steps as (first, last) runs of consecutive steps."""
    out: list[tuple[int, int]] = []
    for s in sorted({int(s) for s in steps}):
        if s < 0:
            raise ValueError("steps must be >= 0")
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _pauses(topo: Topology, steps: Iterable[int], ranks: Iterable[int] | None, kind_: str,
            magnitude: dict[str, float], row: str) -> list[FaultSpec]:
    members = tuple(range(topo.world)) if ranks is None else tuple(sorted({int(r) for r in ranks}))
    every = ranks is None or len(members) == topo.world
    # a pause on some ranks makes the step slow all the same: the rest of the job waits for them
    hosts = () if every else tuple(sorted({f"node-{r // topo.devices_per_host}" for r in members}))
    return [FaultSpec(kind=kind_, scope="job" if every else "rank", start=first, end=last, ranks=members,
                      hosts=hosts, magnitude=magnitude, rules=("SLOW_STEP",), row=row) for first, last in _runs(steps)]


def gc_pauses(topo: Topology, steps: Iterable[int], pause_ms: float,
              ranks: Iterable[int] | None = None) -> list[FaultSpec]:
    """A Python GC pause of `pause_ms` on each of `steps`, on every rank (a job-wide slow step) or the
    listed ones: `gc_leak` pausing every step of its window, without the leak's memory growth; one
    spec per run of consecutive steps."""
    if pause_ms <= 0:
        raise ValueError("pause_ms must be > 0")
    return _pauses(topo, steps, ranks, "gc_leak",
                   {"pause_ms": pause_ms, "every_steps": 1, "mem_pct_per_100_steps": 0.0}, "GC pause")


def data_stalls(topo: Topology, steps: Iterable[int], stall_ms: float,
                ranks: Iterable[int] | None = None) -> list[FaultSpec]:
    """The input pipeline stalls for `stall_ms` (DataLoader `__next__` latency) on each of `steps`, on
    every rank (a job-wide slow step) or the listed ones: `slow_data_loader` with `data_add_ms`; one
    spec per run of consecutive steps."""
    if stall_ms <= 0:
        raise ValueError("stall_ms must be > 0")
    return _pauses(topo, steps, ranks, "slow_data_loader", {"data_add_ms": stall_ms}, "data stall")


# --- job-long conditions (issue #44): the hardware the job runs on from its first step -------------------
# No step effect: the job's plan is built on the changed hardware (`job_hardware`), so every collective on
# the link class and every compute kernel follows from it through the same model as a healthy job's.
@kind("socket_fallback")
def _socket_fallback(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    """Inter-host collectives over TCP sockets from the start (NCCL_IB_DISABLE, a wrong NCCL_SOCKET_IFNAME)."""


@kind("fabric_degraded")
def _fabric_degraded(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    """Inter-host links at a fraction of their bandwidth from the start, on every job of the fabric (a switch
    firmware or congestion-control rollout: PFC pauses, ECN marking off): a fleet-wide drift, not one job's."""


@kind("downclock")
def _downclock(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    """Every device of the job at a lower sustained clock from the start (a power cap, application clocks)."""


def _from_start(kind_: str, rules: tuple[str, ...], row: str, mag: dict[str, float]) -> BuildFaults:
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        return [FaultSpec(kind=kind_, scope="job", start=0, end=None, ranks=tuple(range(topo.world)),
                          magnitude=mag, rules=rules, row=row)]
    return build


# --- scenarios -----------------------------------------------------------------------------
BuildFaults = Callable[[Topology, int, np.random.Generator], list[FaultSpec]]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One benchmark scenario: a family of runs with the same fault at different seeds/sizes."""

    name: str
    layer: str
    summary: str
    rules: tuple[str, ...]
    build: BuildFaults
    moe: bool = False
    jitter: float | None = None  # per-phase healthy jitter when not the default (a noisy but healthy job)
    memory: tuple[float, float, float] | None = None  # the job's device memory (Noise.mem_level_pct,
    #                                                   mem_spread_pct, mem_sawtooth_pct) when not the default
    shape: tuple[int, int, int] | None = None  # (dp, tp, pp) whatever the ranks asked for: a layout of its own
    rhythm: tuple[tuple[str, Any], ...] = ()  # the job's periodic work when not the default (Noise's
    #                                              checkpoint_* and eval_* fields)

    def noise(self) -> Noise | None:
        from producers.simulator.fleet import Noise

        if self.memory is None and self.jitter is None and not self.rhythm:
            return None
        base = Noise() if self.jitter is None else Noise(jitter=self.jitter)
        if self.memory is not None:
            level, spread, saw = self.memory
            base = replace(base, mem_level_pct=level, mem_spread_pct=spread, mem_sawtooth_pct=saw)
        return replace(base, **dict(self.rhythm)) if self.rhythm else base

    def topology(self, ranks: int) -> Topology:
        if self.shape is not None:
            dp, tp, pp = self.shape
            return Topology(dp=dp, tp=tp, pp=pp, ep=1, devices_per_host=8)
        return layout(ranks, moe=self.moe)

    def model(self, topo: Topology) -> ModelConfig:
        if self.moe:
            return ModelConfig(name="mixtral-sim", layers=16, experts=8, ffn=4096,
                               microbatches=default_microbatches(topo))
        return ModelConfig(microbatches=default_microbatches(topo))


def default_microbatches(topo: Topology) -> int:
    """Deeper pipelines run more micro-batches per step (keeps the PP bubble, and MFU, plausible)."""
    return max(8, 4 * topo.pp)


def layout(ranks: int, *, moe: bool = False) -> Topology:
    """A plausible Megatron layout for `ranks` (TP within a host, PP across hosts, rest DP); below 8 ranks a
    data-parallel job (a 2-GPU run: one DP pair, judged by `streams/detect/scopes/slow_pair.py`)."""
    if ranks < 1:
        raise ValueError("at least 1 rank")
    if ranks < 8:
        return Topology(dp=ranks, tp=1, pp=1, ep=1, devices_per_host=8)
    tp = 2 if moe else 4
    pp = 2 if ranks <= 256 else (4 if ranks <= 4096 else 8)
    if ranks % (tp * pp):
        raise ValueError(f"{ranks} ranks do not divide into TP{tp}×PP{pp}")
    dp = ranks // (tp * pp)
    ep = 4 if moe and dp % 4 == 0 else 1
    return Topology(dp=dp, tp=tp, pp=pp, ep=ep, devices_per_host=16 if ranks >= 4096 else 8)


def _window(steps: int) -> tuple[int, int]:
    """Onset half-way (after warm-up and a baseline), lasting a quarter of the run (≥ 10 steps)."""
    start = min(max(20, steps // 2), max(0, steps - 2))
    return start, min(steps - 1, start + max(10, steps // 4))


def _pick_rank(topo: Topology, rng: np.random.Generator) -> int:
    return int(rng.integers(0, topo.world))


def _pick_host(topo: Topology, rng: np.random.Generator) -> int:
    return int(rng.integers(0, topo.hosts))


def _host_fault(kind_: str, scope: ScopeType, rules: tuple[str, ...], row: str, mag: dict[str, float],
                permanent: bool = False) -> BuildFaults:
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start, end = _window(steps)
        host = _pick_host(topo, rng)
        links = (f"node-{host}/rdma",) if scope == "link" else ()
        return [FaultSpec(kind=kind_, scope=scope, start=start, end=None if permanent else end,
                          ranks=tuple(topo.host_ranks(host)), hosts=(f"node-{host}",), links=links,
                          magnitude=mag, rules=rules, row=row)]
    return build


def _flapping_from(start: int, row: str, mag: dict[str, float]) -> BuildFaults:
    """One host's inter-host link flapping from `start` (after warm-up and a baseline) to the end: several
    short episodes far apart, one problem."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        host = _pick_host(topo, rng)
        return [FaultSpec(kind="flapping_link", scope="link", start=min(start, max(0, steps - 2)), end=None,
                          ranks=tuple(topo.host_ranks(host)), hosts=(f"node-{host}",), links=(f"node-{host}/rdma",),
                          magnitude=mag, rules=("SLOW_LINK", "R5"), row=row)]
    return build


def _rank_fault(kind_: str, rules: tuple[str, ...], row: str, mag: dict[str, float],
                permanent: bool = False) -> BuildFaults:
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start, end = _window(steps)
        rank = _pick_rank(topo, rng)
        return [FaultSpec(kind=kind_, scope="rank", start=start, end=None if permanent else end, ranks=(rank,),
                          hosts=(f"node-{rank // topo.devices_per_host}",), magnitude=mag, rules=rules, row=row)]
    return build


def _job_fault(kind_: str, rules: tuple[str, ...], row: str, mag: dict[str, float],
               permanent: bool = False) -> BuildFaults:
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start, end = _window(steps)
        return [FaultSpec(kind=kind_, scope="job", start=start, end=None if permanent else end,
                          ranks=tuple(range(topo.world)), magnitude=mag, rules=rules, row=row)]
    return build


def _group_fault(kind_: str, domain: str, rules: tuple[str, ...], row: str, mag: dict[str, float]) -> BuildFaults:
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start, end = _window(steps)
        groups = topo.groups(domain)
        gid = int(rng.choice(sorted(groups)))
        return [FaultSpec(kind=kind_, scope="group", start=start, end=end, ranks=tuple(groups[gid]), domain=domain,
                          group=gid, magnitude=mag, rules=rules, row=row)]
    return build


def _stage_fault(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, end = _window(steps)
    stage = int(rng.integers(0, topo.pp))
    ranks = np.flatnonzero(topo.coord_arrays["pp"] == stage)
    return [FaultSpec(kind="slow_compute", scope="stage", start=start, end=end, ranks=tuple(int(r) for r in ranks),
                      stage=stage, magnitude={"compute_factor": 1.3}, rules=("SLOW_STAGE",),
                      row="slow PP stage")]


def _scattered_gc(mag: dict[str, float]) -> BuildFaults:
    """A GC storm over most of the run that hits a few random ranks in some of the steps: one job problem."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start = min(max(20, steps // 5), steps - 2)
        return [FaultSpec(kind="gc_storm", scope="job", start=start, end=steps - 1, ranks=tuple(range(topo.world)),
                          magnitude=mag, rules=("R1", "SLOW_STEP"), row="GC storm on random ranks")]
    return build


def _bursts_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    """From step 20 (after warm-up and a baseline) to the end: a burst every 25 steps, 4 in 120 steps."""
    rank = _pick_rank(topo, rng)
    return [FaultSpec(kind="slow_bursts", scope="rank", start=min(20, max(0, steps - 2)), end=None, ranks=(rank,),
                      hosts=(f"node-{rank // topo.devices_per_host}",),
                      magnitude={"compute_factor": 1.3, "burst_steps": 5, "every_steps": 25},
                      rules=("SLOW_RANK",), row="intermittently slow rank")]


def _bad_links_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, end = _window(steps)
    n = max(1, round(0.03 * topo.hosts))
    hosts = sorted(int(h) for h in rng.choice(topo.hosts, size=n, replace=False))
    ranks = tuple(r for h in hosts for r in topo.host_ranks(h))
    return [FaultSpec(kind="bad_links", scope="link", start=start, end=end, ranks=ranks,
                      hosts=tuple(f"node-{h}" for h in hosts), links=tuple(f"node-{h}/rdma" for h in hosts),
                      magnitude={"flap_p": 0.6, "comm_factor_max": 4.0}, rules=("SLOW_LINK", "R5", "R6"),
                      row="Hermes: port flapping and bad links")]


def _foreign_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, end = _window(steps)
    host = 0  # Hermes: rank 3 was the slowest
    return [FaultSpec(kind="foreign_process", scope="host", start=start, end=end, ranks=tuple(topo.host_ranks(host)),
                      hosts=(f"node-{host}",), magnitude={"worst_rank": 3, "spike_p": 0.15, "spike_factor": 5.8},
                      rules=("SLOW_HOST", "R10"), row="Hermes: foreign monitoring process on one node")]


def _healthy(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    return []


@kind("checkpoint_slow")
def _checkpoint_slow(f: FaultSpec, step: int, fx: Effects, job: FleetJob, rng: np.random.Generator) -> None:
    """The checkpoint's storage slowed (a full or degraded filesystem, a throttled object store): its
    device-to-host copy waits on pinned buffers still being written, and the write takes longer."""
    fx.checkpoint_mul = _m(f, "checkpoint_factor", 3.0)


def _checkpoint_degrades(every: int, factor: float) -> BuildFaults:
    """From the job's fourth checkpoint on (its rhythm shown three times), every checkpoint takes `factor`
    times as long: one problem, from that checkpoint to the end."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start = min(4 * every, max(0, steps - 2))
        return [FaultSpec(kind="checkpoint_slow", scope="job", start=start, end=None,
                          ranks=tuple(range(topo.world)), magnitude={"checkpoint_factor": factor},
                          rules=("SLOW_STEP",), row=f"checkpoint {factor:g}x slower than its own past")]
    return build


LEAK_START = 10  # a leak is in the code: it grows from the first steps after warm-up


def _leak_build(pct_per_step: float, peak: float) -> BuildFaults:
    """One rank leaking `pct_per_step` of its device's memory per step (as bytes) from LEAK_START, on a job whose
    devices peak at `peak` % (`Scenario.memory`'s level plus its sawtooth, no spread): its out-of-memory step is
    in the ground truth
    (`oom_step`, the step its allocations reach capacity; past the run's end when the run stops first)."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        rank = _pick_rank(topo, rng)
        mb = pct_per_step / 100.0 * DEVICE_MEM_GB * 1024.0
        start = min(LEAK_START, max(0, steps - 2))
        oom = start + math.ceil((100.0 - peak) / pct_per_step - 1e-9)
        return [FaultSpec(kind="memory_leak", scope="rank", start=start, end=None, ranks=(rank,),
                          hosts=(f"node-{rank // topo.devices_per_host}",),
                          magnitude={"leak_mb_per_step": mb, "device_gb": DEVICE_MEM_GB, "oom_step": float(oom)},
                          rules=("OOM",), row="memory leak (device memory +%/step to capacity)")]
    return build


def _fragmentation_build(pct_per_step: float, peak: float) -> BuildFaults:
    """One rank's caching allocator stranding `pct_per_step` of its device's memory per step (in segments) from
    LEAK_START on a job whose devices peak at `peak` %: reserved reaches capacity at `oom_step`."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        rank = _pick_rank(topo, rng)
        mb = pct_per_step / 100.0 * DEVICE_MEM_GB * 1024.0
        start = min(LEAK_START, max(0, steps - 2))
        oom = start + math.ceil((100.0 - peak) / pct_per_step - 1e-9)
        return [FaultSpec(kind="allocator_fragmentation", scope="rank", start=start, end=None, ranks=(rank,),
                          hosts=(f"node-{rank // topo.devices_per_host}",),
                          magnitude={"frag_mb_per_step": mb, "device_gb": DEVICE_MEM_GB, "oom_step": float(oom)},
                          rules=("OOM",), row="allocator fragmentation (reserved +%/step to capacity, peak flat)")]
    return build


CHECKPOINT_BACK = 20  # a relaunch restarts this many steps before the crash (its last checkpoint)
QUICK_RELAUNCH_S = 20.0  # an elastic agent's restart: rendezvous and checkpoint load, under job_silence_s
SLOW_RELAUNCH_S = 90.0  # a requeue through the scheduler: longer than job_silence_s (60 s)


def _crash(topo: Topology, at: int, rules: tuple[str, ...], row: str, *, restart_after_s: float | None = None,
           evict_host: int | None = None) -> FaultSpec:
    """Every process of attempt 0 dies at step `at`; relaunched CHECKPOINT_BACK steps earlier after
    `restart_after_s` (None: never), without `evict_host` if given. No rules: an event the run
    contains that no detector is expected to report (a quick restart), never a scored fault."""
    mag: dict[str, float] = {}
    if restart_after_s is not None:
        mag = {"restart_from_step": float(max(0, at - CHECKPOINT_BACK)), "restart_after_s": restart_after_s}
    if evict_host is not None:
        mag["evict_host"] = float(evict_host)
    return FaultSpec(kind="job_crash", scope="job", start=at, end=at, ranks=tuple(range(topo.world)),
                     magnitude=mag, rules=rules, row=row)


def _job_crash_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, _ = _window(steps)
    return [_crash(topo, start, ("JOB_STOPPED",), "job crash (every rank and device silent, no end)")]


def _relaunch_slow_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    """Issue #21's restart case: a crash, a relaunch from the checkpoint 20 steps back after 90 s,
    and a rank slow in the second attempt from the crash's step number on (steps re-run by then)."""
    start, _ = _window(steps)
    rank = _pick_rank(topo, rng)
    return [_crash(topo, start, ("JOB_STOPPED",), "job crash, relaunched from its checkpoint",
                   restart_after_s=SLOW_RELAUNCH_S),
            FaultSpec(kind="slow_compute", scope="rank", start=start, end=None, ranks=(rank,),
                      hosts=(f"node-{rank // topo.devices_per_host}",), magnitude={"compute_factor": 1.3},
                      rules=("SLOW_RANK", "R4"), row="slow rank in the relaunch", attempt=1)]


def _elastic_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    """A host dies (the job hangs), the elastic agent tears the job down 25 steps later and relaunches
    it 20 s after without that host (fewer DP replicas, ranks renumbered, host names kept)."""
    start, _ = _window(steps)
    host = _pick_host(topo, rng)
    return [FaultSpec(kind="dead_host", scope="host", start=start, end=None, ranks=tuple(topo.host_ranks(host)),
                      hosts=(f"node-{host}",), rules=("HUNG_HOST",), row="dead host, then an elastic relaunch"),
            _crash(topo, start + 25, (), "torn down by the elastic agent", restart_after_s=QUICK_RELAUNCH_S,
                   evict_host=host)]


def _hang_then_kill(kind_: str, scope: ScopeType, rules: tuple[str, ...], row: str,
                    delays: tuple[int, int] = (6, 40), scored: ScopeType | None = None) -> BuildFaults:
    """A host (or one rank's process) stops; its peers block in their collectives (their devices spin,
    theirs idle); after a delay (a launcher's or watchdog's timeout, several lengths across seeds) the
    whole job is killed and never relaunched: every rank and device silent, no `end`. One fault, one
    incident: the one that stopped first (`scored`: the scope it is scored at, when not the fault's)."""
    def build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
        start, _ = _window(steps)
        delay = int(rng.integers(*delays))
        if scope == "host":
            host = _pick_host(topo, rng)
            ranks, hosts = tuple(topo.host_ranks(host)), (f"node-{host}",)
        else:
            rank = _pick_rank(topo, rng)
            ranks, hosts = (rank,), (f"node-{rank // topo.devices_per_host}",)
        return [FaultSpec(kind=kind_, scope=scored or scope, start=start, end=None, ranks=ranks, hosts=hosts,
                          rules=rules,
                          row=row, magnitude={"killed_after_steps": float(delay)}),
                _crash(topo, min(steps - 1, start + delay), (), "the job killed by its launcher after the hang")]
    return build


def _healthy_restart_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, _ = _window(steps)
    return [_crash(topo, start, (), "preempted and restarted at once", restart_after_s=QUICK_RELAUNCH_S)]


def _healthy_elastic_build(topo: Topology, steps: int, rng: np.random.Generator) -> list[FaultSpec]:
    start, _ = _window(steps)
    return [_crash(topo, start, (), "one host preempted: relaunched without it", restart_after_s=QUICK_RELAUNCH_S,
                   evict_host=_pick_host(topo, rng))]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    # spec §4, hardware
    Scenario("unstable_power", "hardware", "power swings ±15 %, periodic throttling, step time swings > 30 %",
             ("R1", "R2"), _host_fault("unstable_power", "host", ("R1", "R2"), "unstable power",
                                       {"power_swing": 0.15, "throttle": 1.45, "period_steps": 8})),
    Scenario("cooling_loss", "hardware", "one device at ≥ 85 °C and rising, compute −25 %",
             ("R1", "R2", "R4"), _rank_fault("cooling_loss", ("R1", "R2", "R4"), "cooling loss",
                                             {"temp_add_c": 42.0, "compute_cut": 0.25})),
    Scenario("chip_degradation", "hardware", "one device's matmul/attention time +50 % (peak < 70 %)",
             ("R1", "R4"), _rank_fault("chip_degradation", ("R1", "R4"), "chip degradation", {"matmul_factor": 1.5})),
    Scenario("memory_bottleneck", "hardware", "one device's memory-BW util < 40 %, memcpy rate −60 %",
             ("R1", "R9"), _rank_fault("memory_bottleneck", ("R1", "R9"), "memory bottleneck",
                                       {"membw_factor": 0.6, "copy_rate_cut": 0.6})),
    Scenario("link_degradation", "hardware", "one host's RDMA link at < 50 %: its groups' AllReduce ×2",
             ("R5", "R6", "SLOW_LINK"), _host_fault("link_degradation", "link", ("R5", "R6", "SLOW_LINK"),
                                                    "link degradation", {"comm_factor": 2.0})),
    # code
    Scenario("slow_attention", "code", "flash attention (F1/B1) at 40 % of benchmark on every rank",
             ("R4",), _job_fault("slow_attention", ("R4",), "slow attention kernel", {"fa_fraction": 0.4})),
    Scenario("redundant_grad", "code", "backward kernels run twice (×2 backward)",
             ("R4",), _job_fault("redundant_grad", ("R4",), "redundant gradient compute", {"backward_factor": 2.0})),
    Scenario("memory_mismanagement", "code", "one rank's memory ≥ 90 %, allocation retries, copies ×3",
             ("R1", "R9"), _rank_fault("memory_mismanagement", ("R1", "R9"), "memory mismanagement",
                                       {"mem_add_pct": 24.0, "copy_factor": 3.0})),
    Scenario("gc_leak", "code", "one rank: GC pauses of 650 ms every 3 steps, memory +10 %/100 steps",
             ("R1",), _rank_fault("gc_leak", ("R1",), "Python leak / GC", {"pause_ms": 650.0, "every_steps": 3})),
    Scenario("moe_imbalance", "code", "one EP group: hot experts' FFN ×1/0.6, cold ones idle (AI Core 18 %)",
             ("R4",), _group_fault("moe_imbalance", "ep", ("R4",), "MoE imbalance", {"ffn_swing": 0.4}), moe=True),
    Scenario("compile_defect", "code", "launch latency 120 µs on every rank (CU drops)",
             ("R4", "R8"), _job_fault("compile_defect", ("R4", "R8"), "kernel compile defect", {"launch_us": 120.0})),
    # data
    Scenario("bad_data_format", "data", "batch latency ×1.8, H2D −40 %",
             ("R3", "R9"), _job_fault("bad_data_format", ("R3", "R9"), "bad data format",
                                      {"batch_latency_factor": 1.8, "h2d_cut": 0.4})),
    Scenario("heavy_preprocessing", "data", "one host's CPU preprocessing > 50 % of the step",
             ("R10",), _host_fault("interstep_cpu", "host", ("R10",), "heavy preprocessing",
                                   {"interstep_share": 0.55})),
    Scenario("bad_batch_size", "data", "memory ≥ 95 %, AI Core ≤ 50 %, throughput −25 %",
             ("R1", "R3"), _job_fault("bad_batch_size", ("R1", "R3"), "bad batch size",
                                      {"mem_add_pct": 26.0, "aicore_cap_pct": 48.0})),
    Scenario("cache_failure", "data", "DataLoader throughput swings ±25 %",
             ("R3",), _job_fault("cache_failure", ("R3",), "cache failure", {"throughput_swing": 0.25})),
    # deployment
    Scenario("unbalanced_scheduling", "deploy", "one host: half its devices at 100 %, half ≤ 30 %, CU < 0.7",
             ("R1", "R3", "R8"), _host_fault("unbalanced_scheduling", "host", ("R1", "R3", "R8"),
                                             "unbalanced scheduling", {"starved_pct": 28.0})),
    Scenario("wrong_dp_topology", "deploy", "one DP group's AllReduce latency spread 3.5×",
             ("R5", "R6", "SLOW_GROUP"), _group_fault("wrong_dp_topology", "dp", ("R5", "R6", "SLOW_GROUP"),
                                                      "wrong DP topology", {"latency_spread": 3.5})),
    Scenario("early_stream_sync", "deploy", "SynchronizeStream 650 ms per step on every rank, device idle ≥ 35 %",
             ("SLOW_STEP",), _job_fault("early_stream_sync", ("SLOW_STEP",), "early stream sync",
                                        {"sync_ms": 650.0})),
    # the links saturate, so the bandwidth stays where it was on every group: no R5/R6 deviation to see; the
    # fault is a slow step whose cause is the collectives' volume (comm_volume), as issue #21 item 5 decided
    Scenario("uncompressed_gradients", "deploy", "gradient AllReduce bytes ×8: comm > 40 % of step",
             ("SLOW_STEP",), _job_fault("uncompressed_gradients", ("SLOW_STEP",), "uncompressed gradients",
                                        {"grad_bytes_factor": 8.0})),
    Scenario("cpu_device_mismatch", "deploy", "one host: CU < 0.7, memcpy > 30 % of step",
             ("R8", "R9"), _host_fault("cpu_device_mismatch", "host", ("R8", "R9"), "CPU–device mismatch",
                                       {"launch_mad_factor": 4.0, "memcpy_share": 0.35})),
    Scenario("interstep_cpu_work", "deploy", "inter-step CPU work > 50 % of the step on every rank",
             ("R10",), _job_fault("interstep_cpu", ("R10",), "inter-step CPU work", {"interstep_share": 0.55})),
    Scenario("minority_kernels", "deploy", "unmonitored kernels grow: V_minority ≥ 40 %, step +20 %",
             ("R7",), _job_fault("minority_kernels", ("R7",), "minority kernels slow", {"step_growth": 0.2})),
    Scenario("timing_conflicts", "deploy", "1–3 s stalls every 7th step, no single metric off",
             ("SLOW_STEP",), _job_fault("timing_conflict", ("SLOW_STEP",), "timing conflicts",
                                        {"every_steps": 7, "stall_min_ms": 1000.0, "stall_max_ms": 3000.0})),
    # Hermes real cases
    Scenario("hermes_gc_moe", "hermes", "GC storm on a MoE job: unsynchronised 700 ms pauses, throughput dips",
             ("R1", "SLOW_STEP"), _job_fault("gc_storm", ("R1", "SLOW_STEP"), "Hermes: GC fluctuation on MoE",
                                             {"rank_p": 0.25, "pause_ms": 700.0}), moe=True),
    Scenario("gc_scatter", "fleet", "GC pauses of 300–800 ms on one random rank in a third of the steps",
             ("R1", "SLOW_STEP"), _scattered_gc({"step_p": 0.33, "ranks_per_hit": 1})),
    Scenario("gc_scatter_sparse", "fleet", "GC pauses of 400–900 ms on one random rank in a fifth of the steps",
             ("R1", "SLOW_STEP"), _scattered_gc({"step_p": 0.2, "ranks_per_hit": 1, "pause_min_ms": 400.0,
                                                 "pause_max_ms": 900.0})),
    Scenario("gc_scatter_dense", "fleet", "GC pauses of 0.5–1.5 s on four random ranks in half the steps",
             ("R1", "SLOW_STEP"), _scattered_gc({"step_p": 0.5, "ranks_per_hit": 4, "pause_min_ms": 500.0,
                                                 "pause_max_ms": 1500.0})),
    Scenario("hermes_foreign_process", "hermes", "a foreign process on node-0: rank 3 slowest, spikes ×6.8",
             ("SLOW_HOST", "R10"), _foreign_build),
    Scenario("hermes_bad_links", "hermes", "3 % of hosts with flapping ports: their groups' comm ×1.5–4",
             ("SLOW_LINK", "R5", "R6"), _bad_links_build),
    # fleet faults
    # its compute kernels are slow (R4); its links are not: R5 on the peers that wait for it was the rule
    # reading their waiting as transfer (docs/detection.md "Waiting versus transfer")
    Scenario("slow_rank", "fleet", "one straggler, compute ×1.3", ("SLOW_RANK", "R4"),
             _rank_fault("slow_compute", ("SLOW_RANK", "R4"), "slow rank", {"compute_factor": 1.3})),
    Scenario("slow_data_rank", "fleet", "one rank's data loader slow (+30 % of the step): every peer waits for it "
             "inside its collectives", ("SLOW_RANK",),
             _rank_fault("slow_data_loader", ("SLOW_RANK",), "slow data loader", {"data_add_share": 0.3})),
    Scenario("bursty_rank", "fleet", "one rank's compute ×1.3 in 5-step bursts every 25 steps: one incident "
             "recording each burst", ("SLOW_RANK",), _bursts_build),
    Scenario("hung_rank", "fleet", "one rank stops; every peer blocks in its collective",
             ("HUNG_RANK",), _rank_fault("hung_rank", ("HUNG_RANK",), "hung rank", {}, permanent=True)),
    Scenario("dead_host", "fleet", "one host goes silent (no steps, no device samples); the job blocks",
             ("HUNG_HOST",), _host_fault("dead_host", "host", ("HUNG_HOST",), "dead host", {}, permanent=True)),
    Scenario("slow_host", "fleet", "all ranks of one host compute ×1.3", ("SLOW_HOST",),
             _host_fault("slow_compute", "host", ("SLOW_HOST",), "slow host", {"compute_factor": 1.3})),
    Scenario("flapping_link", "fleet", "one host's RDMA link ×3 on/off every 3 steps", ("SLOW_LINK", "R5"),
             _host_fault("flapping_link", "link", ("SLOW_LINK", "R5"), "flapping link",
                         {"comm_factor": 3.0, "flap_steps": 3})),
    Scenario("flapping_link_periodic", "fleet", "one host's inter-host bandwidth down to a tenth for 3 steps every "
             "30 steps, to the end", ("SLOW_LINK", "R5"),
             _flapping_from(20, "link flapping every 30 steps", {"comm_factor": 10.0, "flap_steps": 3,
                                                                  "every_steps": 30})),
    Scenario("flapping_link_brief", "fleet", "one host's inter-host bandwidth down to a fifth for 2 steps every "
             "25 steps, to the end", ("SLOW_LINK", "R5"),
             _flapping_from(20, "link flapping every 25 steps", {"comm_factor": 5.0, "flap_steps": 2,
                                                                  "every_steps": 25})),
    Scenario("slow_pp_stage", "fleet", "every rank of one pipeline stage compute ×1.3", ("SLOW_STAGE",),
             _stage_fault),
    Scenario("step_time_shift", "fleet", "a config change: every step +25 % from then on (a new normal)",
             ("SLOW_STEP",), _job_fault("slow_compute", ("SLOW_STEP",), "permanent step-time shift",
                                        {"compute_factor": 1.25}, permanent=True)),
    # job attempts (contract 1.4, producers.simulator.attempts)
    Scenario("hang_then_kill", "attempts", "a host goes silent, its peers block; the job is killed 6–40 steps "
             "later (every rank and device silent, no end, no relaunch)", ("HUNG_HOST",),
             _hang_then_kill("dead_host", "host", ("HUNG_HOST",), "dead host, then the job killed")),
    Scenario("rank_crash_then_kill", "attempts", "one rank's process dies (its device idles), its peers block "
             "in their collectives; the job is torn down 4–12 steps later", ("HUNG_RANK",),
             _hang_then_kill("hung_rank", "rank", ("HUNG_RANK",), "a rank's process died, then the job killed",
                             (4, 13))),
    # torchrun's agent kills the other workers within a second or two of one's exit: too few device samples
    # (1 Hz) show which rank stopped first, so the one incident is the job's stop (docs/detection.md)
    Scenario("rank_crash_quick_kill", "attempts", "one rank's process dies; its launcher kills the job 1–2 "
             "steps later", ("JOB_STOPPED",), _hang_then_kill("hung_rank", "rank", ("JOB_STOPPED",),
                                                              "a rank died, the job killed at once", (1, 3),
                                                              scored="job")),
    Scenario("job_crash", "attempts", "every rank and device silent at once, no end", ("JOB_STOPPED",),
             _job_crash_build),
    Scenario("relaunch_slow_rank", "attempts", "a crash, relaunched 90 s later from 20 steps back; a rank slow "
             "in the relaunch", ("JOB_STOPPED", "SLOW_RANK", "R4"), _relaunch_slow_build),
    Scenario("elastic_relaunch", "attempts", "a dead host hangs the job; relaunched 20 s after without it",
             ("HUNG_HOST",), _elastic_build),
    # below what the fleet achieves, from the job's first step (issue #44): judged against reference models
    # fitted on healthy jobs of other layouts (bench.detection.reference)
    Scenario("socket_fallback", "expected", "inter-host collectives on TCP sockets from step 0 (a third of RDMA's "
             "bandwidth), TP4 PP2 DP8", ("BELOW_EXPECTED",),
             _from_start("socket_fallback", ("BELOW_EXPECTED",), "socket fallback from the start", {})),
    Scenario("socket_fallback_256", "expected", "inter-host collectives on TCP sockets from step 0, 256 ranks "
             "TP8 PP2 DP16", ("BELOW_EXPECTED",),
             _from_start("socket_fallback", ("BELOW_EXPECTED",), "socket fallback from the start", {}),
             shape=(16, 8, 2)),
    Scenario("compute_downclock", "expected", "every device at 0.8x its rated clock from step 0, TP4 PP2 DP8",
             ("BELOW_EXPECTED",), _from_start("downclock", ("BELOW_EXPECTED",), "compute 0.8x from the start",
                                              {"clock_factor": 0.8})),
    Scenario("compute_downclock_256", "expected", "every device at 0.8x its rated clock from step 0, 256 ranks "
             "TP4 PP4 DP16", ("BELOW_EXPECTED",),
             _from_start("downclock", ("BELOW_EXPECTED",), "compute 0.8x from the start", {"clock_factor": 0.8}),
             shape=(16, 4, 4)),
    # a fleet-wide drift (issue #44): every multi-host job of the fabric slow from its start together; the bench
    # runs it as a fleet of its own (bench.detection.run.DRIFT_PHASES: this fabric, then down-clocked devices,
    # each with a healthy job beside) and expects ONE fleet incident per drift, none per job
    Scenario("fleet_drift", "drift", "a fabric rollout leaves RoCE at 40 % of its bandwidth for every job on it "
             "from their start: 4 jobs of 4 layouts, a healthy job on another fabric beside", ("BELOW_EXPECTED",),
             _from_start("fabric_degraded", ("BELOW_EXPECTED",), "fabric at 40 % from the start",
                         {"bw_factor": 0.4})),
    # a leak's growth per step to the device's capacity (issue #44): the OOM forecast, >= 50 steps ahead; the
    # levels and rates put the out-of-memory step at 170, past a 120-step run (the run stops before the crash;
    # the forecast judges a device once it has ~2 windows of samples, ~step 80 here)
    Scenario("memory_leak_slow", "memory", "one rank leaks 0.05 %/step (33 MB) from 92 %: out of memory at "
             "step 170", ("OOM",), _leak_build(0.05, 92.0), memory=(92.0, 0.0, 0.0)),
    Scenario("memory_leak", "memory", "one rank leaks 0.1 %/step (66 MB) from 84 %: out of memory at step 170",
             ("OOM",), _leak_build(0.1, 84.0), memory=(84.0, 0.0, 0.0)),
    Scenario("memory_leak_sawtooth", "memory", "one rank leaks 0.2 %/step (131 MB) from 60 % under an 8 % "
             "per-step sawtooth: its peak out of memory at step 170", ("OOM",), _leak_build(0.2, 68.0),
             memory=(60.0, 0.0, 8.0)),
    Scenario("memory_leak_fast", "memory", "one rank leaks 0.3 %/step (197 MB) from 52 %: out of memory at "
             "step 170", ("OOM",), _leak_build(0.3, 52.0), memory=(52.0, 0.0, 0.0)),
    Scenario("allocator_fragmentation", "memory", "one rank's caching allocator strands 0.1 %/step (66 MB, a "
             "segment every 4 steps) from 84 % while its peak stays flat: reserved full at step 170", ("OOM",),
             _fragmentation_build(0.1, 84.0), memory=(84.0, 0.0, 0.0)),
    Scenario("allocator_fragmentation_slow", "memory", "one rank's caching allocator strands 0.05 %/step from 91 % "
             "under a 1 % per-step sawtooth: reserved full at step 170", ("OOM",),
             _fragmentation_build(0.05, 92.0), memory=(91.0, 0.0, 1.0)),
    # periodic work is the job's rhythm (issue #45 class 4): an asynchronous checkpoint's write slows the steps
    # after it by ~12 % for several steps; a checkpoint whose storage slows is a fault once it is slower than
    # its own past
    Scenario("checkpoint_degrades", "rhythm", "an asynchronous checkpoint every 25 steps; from the fourth on, its "
             "storage 3x slower (copy 1.8 s, write slowing 18 steps)", ("SLOW_STEP",),
             _checkpoint_degrades(25, 3.0), rhythm=(("checkpoint_every", 25), ("checkpoint_ms", 600.0),
                                                    ("checkpoint_write_ms", 8000.0))),
    Scenario("checkpoint_degrades_sync", "rhythm", "a synchronous 1.5 s checkpoint every 20 steps; from the fourth "
             "on, 2.5x slower", ("SLOW_STEP",), _checkpoint_degrades(20, 2.5),
             rhythm=(("checkpoint_every", 20), ("checkpoint_ms", 1500.0))),
    Scenario("healthy", "healthy", "no fault: jitter, warm-up, checkpoints, eval, hiccups, GC", (), _healthy),
    Scenario("healthy_checkpoint_async", "healthy", "no fault; an asynchronous checkpoint every 30 steps (0.6 s "
             "copy, a 10 s write slowing the next ~7 steps by 12 %)", (), _healthy,
             rhythm=(("checkpoint_every", 30), ("checkpoint_ms", 600.0), ("checkpoint_write_ms", 10000.0))),
    Scenario("healthy_checkpoint_eval", "healthy", "no fault; evaluation every 20 steps, an asynchronous "
             "checkpoint every 40 (1.2 s copy, a 5 s write at 20 %) on an evaluation step", (), _healthy,
             rhythm=(("eval_every", 20), ("checkpoint_every", 40), ("checkpoint_ms", 1200.0),
                     ("checkpoint_write_ms", 5000.0), ("checkpoint_write_slowdown", 0.2))),
    Scenario("healthy_full_memory", "healthy", "no fault; device memory steady at 95-97 % (a caching allocator "
             "keeping HBM full by design)", (), _healthy, memory=(95.0, 2.0, 0.0)),
    Scenario("healthy_memory_sawtooth", "healthy", "no fault; device memory 88-90 % plus an 8 % per-step "
             "sawtooth (activations allocated and freed every step, peaks at 96-98 %)", (), _healthy,
             memory=(88.0, 2.0, 8.0)),
    Scenario("healthy_restart", "healthy", "no fault; preempted and restarted from 20 steps back within 20 s", (),
             _healthy_restart_build),
    Scenario("healthy_elastic", "healthy", "no fault; one host preempted, relaunched without it within 20 s", (),
             _healthy_elastic_build),
    Scenario("healthy_jittery", "healthy", "no fault, 8 % per-phase jitter (the noisiest healthy job the bench "
             "vouches for)", (), _healthy, jitter=0.08),
)}


def build_faults(scenario: Scenario, topo: Topology, steps: int, seed: int) -> list[FaultSpec]:
    return scenario.build(topo, steps, np.random.default_rng([seed, 7919]))


def scenario_job(name: str, ranks: int = 64, steps: int = 120, seed: int = 0, job_id: str | None = None,
                 traits: Traits | None = None) -> FleetJob:
    """A catalogue scenario as a ready FleetJob (layout, model and faults as the bench uses them; every trait
    on unless `traits` says otherwise)."""
    from producers.simulator.fleet import FleetJob

    sc = SCENARIOS[name]
    topo = sc.topology(ranks)
    return FleetJob(job_id or f"{name}-{ranks}-s{seed}", topo, steps, build_faults(sc, topo, steps, seed), seed,
                    model=sc.model(topo), noise=sc.noise(), traits=traits)
