"""The fleet simulator: a synchronous training job of 8 to 10,240+ ranks, in numpy columns.

One step, vectorised over ranks (see docs/scenarios.md for the full model):

- every rank runs its stage's kernels (model.build_plan) with per-kind, per-rank jitter;
  forward/backward are their compute kernels plus the TP/EP/CP collectives' own time;
- a collective kernel is the rank's wait for its group's last arriver plus the transfer
  (trait `collective_wait`, producers.simulator.traits / waits): a late rank's TP/CP/EP peers
  wait in those collectives, the other stages of its pipeline in PP recv, the other replicas
  in the DP all-reduce; a rank whose exposed transfers end late (a slow DP group) holds its
  peers the same way. Trait off: the TP all-reduce waits for the TP group's slowest rank and
  the DP all-reduce for the rest of the job (the earlier ruler);
- the step ends for everyone together at max(busy) + tail, tail = PP bubble + PP send/recv
  + the exposed (last) DP gradient bucket + the exposed 39 % of EP all-to-all;
- exposed communication of a rank = step − its busy time, so the late arriver shows the
  shortest wait, its peers the longest, and its collectives' kernel times are the shortest;
- device samples (T1–T7) tick at `device_hz` on the job clock; power follows the AI Core
  load, temperature follows power through a first-order lag.

Healthy noise: per-phase, per-rank jitter, a job-wide per-step jitter, warm-up, periodic
checkpoint and evaluation steps, data-loader hiccups, GC pauses, and the natural imbalance
of the last pipeline stage (LM head). Faults (producers.simulator.catalogue) act on the
`Effects` of a step before the timing model runs, so their visible effect comes out of the
same synchronisation rule as healthy behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from producers.simulator.conditions import job_hardware, leak_pct
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.model import BUSY_PHASES, Hardware, ModelConfig, StepPlan, build_plan
from producers.simulator.topology import Topology
from producers.simulator.traits import (
    CLOCK_OFFSET_SIGMA_MS,
    HEAVY_TAIL_ALPHA,
    HEAVY_TAIL_CAP_MS,
    HEAVY_TAIL_MIN_MS,
    HEAVY_TAIL_P,
    VARIABLE_LENGTH_SIGMA,
    Traits,
)
from producers.simulator.waits import COUPLING, couple, group_max
from schemas import JobEvent, StepEvent

if TYPE_CHECKING:
    from producers.simulator.catalogue import FaultSpec

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

DEFAULT_START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
EP_EXPOSED = 0.39  # MoE paper: only ≈ 61 % of EP communication is hidden behind compute


@dataclass(frozen=True, slots=True)
class Noise:
    """Healthy behaviour. `jitter` is the per-phase, per-rank lognormal sigma (≈ CV); keep it ≤ 0.08."""

    jitter: float = 0.03
    step_jitter: float = 0.015
    warmup_steps: int = 5
    warmup_factor: float = 2.0
    checkpoint_every: int = 100
    checkpoint_ms: float = 1500.0
    # an asynchronous checkpoint (torch.distributed.checkpoint.async_save, MindSpore's async_save): the step
    # blocks only for `checkpoint_ms` (the shard's device-to-host copy); the write to storage runs in the
    # background for `checkpoint_write_ms` of wall time, its thread (serialising under the GIL) adding
    # `checkpoint_write_slowdown` of a step to the host work between the steps it overlaps. 0: a synchronous save
    checkpoint_write_ms: float = 0.0
    checkpoint_write_slowdown: float = 0.12
    eval_every: int = 50
    eval_factor: float = 0.5
    data_ms: float = 12.0
    hiccup_p: float = 0.01
    hiccup_ms: float = 40.0
    gc_p: float = 0.02
    gc_ms: float = 30.0
    interstep_ms: float = 4.0
    optimizer_frac: float = 0.03
    # device memory (T6), % of capacity: each device holds a steady level of the job's own, mem_level_pct plus
    # up to mem_spread_pct (None: the simulator's 68-74 %); a caching allocator or large micro-batches keep it
    # at 90-97 % by design. mem_sawtooth_pct: what a step allocates (activations) and frees by its end, so a
    # sample reads level + sawtooth x the share of the step gone by
    mem_level_pct: float | None = None
    mem_spread_pct: float = 6.0
    mem_sawtooth_pct: float = 0.0

    @classmethod
    def quiet(cls, jitter: float = 0.015) -> Noise:
        """Per-rank and per-step jitter only: no warm-up, checkpoint, evaluation, data-loader hiccup or
        GC step. For tests that count steps or need a clean healthy baseline; the catalogue's
        scenarios (and bench-detection) keep the default, realistic healthy behaviour."""
        return cls(jitter=jitter, warmup_steps=0, checkpoint_every=0, eval_every=0, hiccup_p=0.0, gc_p=0.0)


@dataclass(slots=True)
class Effects:
    """What faults change in one step, as multipliers/offsets over ranks (neutral by default)."""

    world: int
    n_kinds: int
    kernel_mul: FloatArray = field(init=False)  # [kinds, world] device-time multiplier
    count_mul: FloatArray = field(init=False)  # [kinds, world] extra calls (redundant work)
    bytes_mul: FloatArray = field(init=False)  # [kinds, world]
    comm_group_mul: dict[str, FloatArray] = field(default_factory=dict)  # domain -> per-rank link factor
    phase_add: dict[str, FloatArray] = field(default_factory=dict)  # ms
    phase_mul: dict[str, FloatArray] = field(default_factory=dict)
    launch_mul: FloatArray = field(init=False)
    launch_mad_mul: FloatArray = field(init=False)
    other_add_ms: FloatArray = field(init=False)
    gc_count_add: IntArray = field(init=False)
    stall_ms: float = 0.0  # job-wide stall (in the exposed communication of every rank)
    silent: BoolArray = field(init=False)  # no step/kernel_summary events from these ranks
    device_silent: BoolArray = field(init=False)  # no device samples either (dead host)
    halted: bool = False  # the job no longer completes steps (a hung rank blocks every collective)
    temp_add: FloatArray = field(init=False)
    power_mul: FloatArray = field(init=False)
    freq_mul: FloatArray = field(init=False)
    aicore_cap: FloatArray = field(init=False)  # ≤ 100: utilisation ceiling
    aicore_set: FloatArray = field(init=False)  # nan: computed from load; else forced
    mem_add: FloatArray = field(init=False)
    frag_add: FloatArray = field(init=False)  # % of capacity the caching allocator holds unused (fragmentation)
    membw_mul: FloatArray = field(init=False)
    cpu_add: FloatArray = field(init=False)
    checkpoint_mul: float = 1.0  # a checkpoint's copy and write take this many times as long (storage slowed)

    def __post_init__(self) -> None:
        w, k = self.world, self.n_kinds
        self.kernel_mul = np.ones((k, w))
        self.count_mul = np.ones((k, w))
        self.bytes_mul = np.ones((k, w))
        self.launch_mul = np.ones(w)
        self.launch_mad_mul = np.ones(w)
        self.other_add_ms = np.zeros(w)
        self.gc_count_add = np.zeros(w, dtype=np.int64)
        self.silent = np.zeros(w, dtype=bool)
        self.device_silent = np.zeros(w, dtype=bool)
        self.temp_add = np.zeros(w)
        self.power_mul = np.ones(w)
        self.freq_mul = np.ones(w)
        self.aicore_cap = np.full(w, 100.0)
        self.aicore_set = np.full(w, np.nan)
        self.mem_add = np.zeros(w)
        self.frag_add = np.zeros(w)
        self.membw_mul = np.ones(w)
        self.cpu_add = np.zeros(w)

    def add(self, phase: str, where: IntArray | slice | list[int], ms: float | FloatArray) -> None:
        self.phase_add.setdefault(phase, np.zeros(self.world))[where] += ms

    def mul(self, phase: str, where: IntArray | slice | list[int], factor: float | FloatArray) -> None:
        self.phase_mul.setdefault(phase, np.ones(self.world))[where] *= factor

    def comm(self, domain: str, where: IntArray | slice | list[int], factor: float) -> None:
        arr = self.comm_group_mul.setdefault(domain, np.ones(self.world))
        arr[where] = np.maximum(arr[where], factor)


CONTEXT_PCT = 1.5  # of a device's memory that is no allocator's: the runtime context, the collectives' buffers


@dataclass(slots=True)
class AllocatorModel:
    """A caching allocator (PyTorch's, torch_npu's) per device, what the hook's statistics read (trait
    `allocator_stats`). The device holds (T6) the runtime's context plus what the allocator reserved; the
    allocator reserves its peak plus a slack of cached blocks (0.5-3 % of capacity, per device) and never
    gives a segment back (no empty_cache), so reserved is the running maximum of peak + slack, plus what
    fragmentation strands (`Effects.frag_add`). A leak grows the peak; fragmentation grows reserved alone."""

    slack: FloatArray
    base: FloatArray  # the peak's steady level, % of capacity
    held: FloatArray  # reserved so far, % of capacity
    rng: np.random.Generator

    @classmethod
    def draw(cls, rng: np.random.Generator, level: FloatArray) -> AllocatorModel:
        slack = rng.uniform(0.5, 3.0, level.size)
        return cls(slack=slack, base=level - CONTEXT_PCT - slack, held=np.zeros(level.size), rng=rng)

    def step(self, fx: Effects, sawtooth_pct: float) -> dict[str, FloatArray]:
        """This step's peak and reserved, % of capacity (the peak reads the step's activations on top)."""
        peak = self.base + fx.mem_add + sawtooth_pct + self.rng.normal(0.0, 0.05, self.base.size)
        self.held = np.maximum(self.held, peak + self.slack)
        reserved = np.minimum(self.held + fx.frag_add, 100.0 - CONTEXT_PCT)
        return {"mem_peak_pct": np.clip(peak, 0.0, 100.0), "mem_reserved_pct": reserved}


@dataclass(slots=True)
class DeviceTick:
    """Device samples of one sampling tick, columns over devices (= ranks)."""

    ts_ns: int
    power_w: FloatArray
    temp_c: FloatArray
    aicore_pct: FloatArray
    aicpu_pct: FloatArray
    ctrlcpu_pct: FloatArray
    mem_pct: FloatArray
    membw_pct: FloatArray
    freq_mhz: FloatArray
    reporting: BoolArray


@dataclass(slots=True)
class StepFrame:
    """One simulated step: every rank's step fields, kernel aggregates and the device ticks inside it."""

    step: int
    start_ns: int
    end_ns: int
    completed: bool  # False once the job is halted: no step events, only device samples
    phases: dict[str, FloatArray]  # BUSY_PHASES + comm_exposed_ms, ms
    gc_count: IntArray
    reporting: BoolArray
    k_count: IntArray  # [kinds, world]
    k_total_ns: FloatArray
    k_max_ns: FloatArray
    k_wait_ns: FloatArray  # [kinds, world] the collective_wait trait's waits inside k_total_ns (and k_max_ns,
    # spread evenly over the calls); zeros with the trait off, whose TP/DP waits sit in k_total_ns only
    k_bytes: FloatArray
    launch_mean_us: FloatArray
    launch_mad_us: FloatArray
    other_ns: FloatArray
    ticks: list[DeviceTick]
    effects: Effects
    tokens_mul: FloatArray | None = None  # per rank: its replica's tokens this step / nominal (variable_length)
    mem_peak_pct: FloatArray | None = None  # per rank, % of capacity: the allocator's peak (allocator_stats)
    mem_reserved_pct: FloatArray | None = None  # ... what it holds reserved at the step's end

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def busy_ms(self) -> FloatArray:
        result: FloatArray = np.sum([self.phases[p] for p in BUSY_PHASES], axis=0)
        return result


STALL_PHASES = ("data_ms", "forward_ms", "interstep_cpu_ms")


def heavy_tail_stalls(rng: np.random.Generator, world: int) -> dict[str, FloatArray]:
    """One step's heavy-tailed stalls (the heavy_tail trait): per phase of STALL_PHASES, the ms each
    rank loses; a rank-step is hit with probability HEAVY_TAIL_P, for HEAVY_TAIL_MIN_MS × a Pareto
    (alpha HEAVY_TAIL_ALPHA) draw capped at HEAVY_TAIL_CAP_MS, in one phase picked at random."""
    out = {name: np.zeros(world) for name in STALL_PHASES}
    hit = np.flatnonzero(rng.random(world) < HEAVY_TAIL_P)
    if hit.size:
        lost = np.minimum(HEAVY_TAIL_MIN_MS * (1.0 + rng.pareto(HEAVY_TAIL_ALPHA, hit.size)), HEAVY_TAIL_CAP_MS)
        where = rng.integers(0, len(STALL_PHASES), hit.size)
        for i, name in enumerate(STALL_PHASES):
            out[name][hit[where == i]] = lost[where == i]
    return out


class FleetJob:
    """A simulated job: topology, model, hardware, healthy noise and injected faults."""

    def __init__(self, job_id: str, topology: Topology, steps: int, faults: Sequence[FaultSpec] = (), seed: int = 0,
                 *, model: ModelConfig | None = None, hardware: Hardware | None = None, noise: Noise | None = None,
                 start_ns: int = DEFAULT_START_NS, device_hz: float = 1.0, traits: Traits | None = None,
                 attempt: int = 0, first_step: int = 0, host_names: Sequence[str] | None = None) -> None:
        if steps < 1:
            raise ValueError("steps must be >= 1")
        if not 0 <= first_step < steps:
            raise ValueError("first_step must be in [0, steps)")
        self.job_id = job_id
        self.attempt = attempt  # contract 1.4: which launch of the job (producers.simulator.attempts)
        self.first_step = first_step  # a relaunch restarts from its checkpoint: steps first_step .. steps - 1
        names = list(host_names) if host_names is not None else [f"node-{h}" for h in range(topology.hosts)]
        if len(names) != topology.hosts:
            raise ValueError(f"{len(names)} host names for {topology.hosts} hosts")
        self.host_names = tuple(names)  # an elastic relaunch keeps the names of the hosts it kept
        self.topology = topology
        self.steps = steps
        self.faults = tuple(faults)
        self.seed = seed
        self.model = model or ModelConfig(microbatches=max(8, 4 * topology.pp))
        # a job-long condition (a socket fallback, down-clocked devices) is the hardware the job runs on
        self.hardware = job_hardware(hardware or Hardware(), faults)
        self.noise = noise or Noise()
        self.start_ns = start_ns
        self.device_hz = device_hz
        self.traits = traits or Traits()
        if self.model.layers % topology.pp:
            raise ValueError(f"pp={topology.pp} must divide layers={self.model.layers}")
        self.plan: StepPlan = build_plan(self.model, topology, self.hardware)
        for fault in self.faults:
            fault.check(self)
            if fault.attempt != attempt:
                raise ValueError(f"a fault of attempt {fault.attempt} given to attempt {attempt}")

    @cached_property
    def clock_offset_ns(self) -> IntArray:
        """Per rank, its host's clock offset (the clock_offset trait; zeros without it)."""
        if not self.traits.clock_offset:
            return np.zeros(self.world, dtype=np.int64)
        rng = np.random.default_rng([self.seed, 4099])
        per_host = np.rint(rng.normal(0.0, CLOCK_OFFSET_SIGMA_MS * 1e6, self.topology.hosts)).astype(np.int64)
        offsets: IntArray = per_host[self.topology.host_ids]
        return offsets

    @cached_property
    def sampler_phase_ns(self) -> IntArray:
        """Per rank, when within each sampling interval its host's device agent samples (the
        clock_offset trait: every node agent started at its own moment; zeros without it)."""
        if not self.traits.clock_offset:
            return np.zeros(self.world, dtype=np.int64)
        rng = np.random.default_rng([self.seed, 4111])
        per_host = rng.integers(0, round(1e9 / self.device_hz), self.topology.hosts)
        phases: IntArray = per_host.astype(np.int64)[self.topology.host_ids]
        return phases

    @property
    def crash_step(self) -> int | None:
        """The step at which this attempt's processes die (a `job_crash` fault, or a device out of memory:
        `oom_step`): no frame from it on."""
        crashes = [f.start for f in self.faults if f.kind == "job_crash"]
        oom = self.oom_step
        return min([*crashes, *([] if oom is None else [oom])], default=None)

    @cached_property
    def mem_levels(self) -> FloatArray:
        """Per device, its steady memory level (% of capacity) before any fault: the first draw of the timing
        model's stream (`iter_frames` draws it there too, so every later number stays as it was)."""
        u = np.random.default_rng(self.seed).random(self.world)
        level = 68.0 if self.noise.mem_level_pct is None else self.noise.mem_level_pct
        levels: FloatArray = level + self.noise.mem_spread_pct * u
        return levels

    @cached_property
    def oom_step(self) -> int | None:
        """The first step a device's allocations reach its capacity (a `memory_leak`'s growth over its level):
        its allocation fails, the rank dies out of memory and takes the job's processes with it (None: never)."""
        out: int | None = None
        for f in self.faults:
            if f.kind not in ("memory_leak", "allocator_fragmentation") or f.attempt != self.attempt:
                continue
            rate = leak_pct(f)
            if rate <= 0:
                continue
            room = 100.0 - float(max(self.mem_levels[r] for r in f.ranks)) - self.noise.mem_sawtooth_pct  # its peak
            step = f.start + max(0, int(np.ceil(room / rate)))
            if (f.end is None or step <= f.end) and step < self.steps:
                out = step if out is None else min(out, step)
        return out

    @property
    def world(self) -> int:
        return self.topology.world

    # --- the job as typed events (the demo, the emitter, engine tests) ----------------------------
    def iter_steps(self) -> Iterator[list[StepEvent]]:
        """Every completed step's StepEvents, one list per step (the reporting ranks, in rank order).

        Built by the encoder the stream sends with (events.FrameEncoder.step_events), so a typed
        consumer and the wire see the same fields; a halted step (a hung rank) has no list."""
        from producers.simulator.events import FrameEncoder  # events.py builds on this module

        encoder = FrameEncoder(self, ("step",))
        for frame in self.iter_frames():
            if frame.completed:
                yield encoder.step_events(frame)

    def step_durations_ms(self) -> list[float]:
        """Each simulated step's duration (halted steps included), from the timing model alone."""
        return [frame.duration_ms for frame in self.iter_frames()]

    def end_ns(self) -> int:
        """When the last step ends on the job clock (runs the timing model, builds no events)."""
        end = self.start_ns
        for frame in self.iter_frames():
            end = frame.end_ns
        return end

    def job_events(self) -> tuple[JobEvent, JobEvent]:
        """The launch's `start` and `end` lifecycle events (step events only: no kernel summaries
        declared). `end` carries the last completed step; a launch that crashes (`job_crash`) sends
        no `end` in a real fleet, so its callers leave it out."""
        end_ns, last = self.start_ns, self.first_step
        for frame in self.iter_frames():
            end_ns = frame.end_ns
            last = frame.step if frame.completed else last
        parallel = self.topology.parallel()
        start = JobEvent(job=self.job_id, phase="start", world=self.world, ts_ns=self.start_ns, parallel=parallel,
                         model=self.model.name, attempt=self.attempt)
        end = JobEvent(job=self.job_id, phase="end", world=self.world, ts_ns=end_ns, parallel=parallel,
                       last_step=last, model=self.model.name, attempt=self.attempt)
        return start, end

    def ground_truth(self) -> GroundTruth:
        """This launch's faults as the ground truth a detector is scored against (catalogue JSONL lines)."""
        return GroundTruth.of(self.job_id, self.faults, self.seed, self.steps)

    @cached_property
    def nominal_ms(self) -> float:
        """The healthy step time without jitter or faults (what faults scale their magnitudes by)."""
        frame = next(iter(FleetJob(self.job_id, self.topology, 1, (), self.seed, model=self.model,
                                   hardware=self.hardware, noise=Noise(jitter=0.0, step_jitter=0.0, warmup_steps=0,
                                                                      hiccup_p=0.0, gc_p=0.0),
                                   start_ns=self.start_ns, traits=self.traits).iter_frames()))
        return frame.duration_ms

    def _collective_waits(self, busy: FloatArray, transfer_ns: FloatArray, gids: dict[str, IntArray]) -> FloatArray:
        """[kinds, world] ns each rank spends in its collectives waiting for the group's last arriver.

        Two arrivals hold peers up: each rank's own work before its collectives (`busy`), and at
        the end of the step its own exposed transfers (the last DP bucket, the exposed share of EP
        all-to-all, its PP send/recv), by which a rank of a slow group starts late into the next
        layer's TP all-reduce. Each is followed along the groups (`waits.couple`); PP waits land in
        recv. What no collective connects (none in practice) stays in the DP all-reduce.
        """
        index = self.plan.kind_index
        keys = {"tp": "allreduce/tp", "cp": "allgather/cp", "ep": "alltoall/ep", "pp": "recv/pp", "dp": "allreduce/dp"}
        kinds = {d: index[k] for d, k in keys.items() if k in index and d in gids}
        domains = [d for d in COUPLING if d in kinds]
        out = np.zeros_like(transfer_ns)
        late = np.zeros_like(busy)
        if "dp" in kinds:
            late += transfer_ns[kinds["dp"]] / 1e6 / 4.0
        if "ep" in kinds:
            late += transfer_ns[kinds["ep"]] / 1e6 * EP_EXPOSED
        if "pp" in kinds and "send/pp" in index:
            late += (transfer_ns[index["send/pp"]] + transfer_ns[kinds["pp"]]) / 1e6 * 0.5
        for arrival in (busy, late):
            waits, left = couple(arrival, gids, domains)
            for d in domains:
                out[kinds[d]] += waits[d] * 1e6
            if "dp" in kinds:
                out[kinds["dp"]] += left * 1e6
        return out

    def iter_frames(self) -> Iterator[StepFrame]:
        """The timing model, one step at a time (a fresh RNG per call: same seed, same numbers)."""
        rng = np.random.default_rng(self.seed)
        topo, plan, hw, nz = self.topology, self.plan, self.hardware, self.noise
        world, n_k = topo.world, len(plan.kinds)
        counts = np.stack([k.count for k in plan.kinds]).astype(np.float64)
        call_ns = np.array([k.call_ns for k in plan.kinds])[:, None]
        phase_of = [k.phase for k in plan.kinds]
        fwd_c = np.array([p == "forward" and k.cat == "compute" for p, k in zip(phase_of, plan.kinds, strict=True)])
        bwd_c = np.array([p == "backward" and k.cat == "compute" for p, k in zip(phase_of, plan.kinds, strict=True)])
        fb_comm = np.array([p == "forward" and k.cat == "comm" for p, k in zip(phase_of, plan.kinds, strict=True)])
        data_k = np.array([p == "data" for p in phase_of])
        opt_k = np.array([p == "optimizer" for p in phase_of])
        dp_i = plan.kind_index.get("allreduce/dp")
        tp_i = plan.kind_index.get("allreduce/tp")
        ep_i = plan.kind_index.get("alltoall/ep")
        send_i, recv_i = plan.kind_index.get("send/pp"), plan.kind_index.get("recv/pp")
        domains = {k.domain for k in plan.kinds if k.domain}
        gids = topo.group_ids
        temp = np.full(world, hw.ambient_c + hw.c_per_w * (hw.idle_w + 0.7 * (hw.max_w - hw.idle_w)))
        rng.random(world)  # the devices' memory levels (`mem_levels`): drawn here, kept in the stream
        mem_base = self.mem_levels
        sigma, mu = nz.jitter, -0.5 * nz.jitter**2
        tick_ns = round(1e9 / self.device_hz)
        next_tick = self.start_ns
        start_ns = self.start_ns
        nominal_ms: float | None = None
        halted_since: int | None = None
        crash = self.crash_step
        # each trait draws from its own stream: turning one off leaves every other number as it was
        length_rng, tail_rng = np.random.default_rng([self.seed, 8191]), np.random.default_rng([self.seed, 8209])
        alloc = AllocatorModel.draw(np.random.default_rng([self.seed, 8221]), mem_base) \
            if self.traits.allocator_stats else None
        compute_k = np.array([k.cat == "compute" for k in plan.kinds])
        replica = topo.coord_arrays["dp"]
        write_left_ms = 0.0  # an asynchronous checkpoint's write still running in the background
        for step in range(self.first_step, self.steps):
            if crash is not None and step >= crash:
                return  # the job's processes are gone: no step, no device sample, no `end`
            fx = Effects(world, n_k)
            for fault in self.faults:
                if fault.covers(step):
                    fault.apply(step, fx, self, rng)
            # --- kernels -----------------------------------------------------------------
            noise_k = rng.lognormal(mu, sigma, size=(n_k, world)) if sigma > 0 else np.ones((n_k, world))
            g = float(rng.lognormal(-0.5 * nz.step_jitter**2, nz.step_jitter)) if nz.step_jitter > 0 else 1.0
            warm = 1.0 + nz.warmup_factor * max(0.0, 1.0 - (step - self.first_step) / nz.warmup_steps) ** 2 \
                if nz.warmup_steps else 1.0  # every launch warms up again (compile, caches, allocator)
            k_count = np.rint(counts * fx.count_mul).astype(np.int64)
            link = np.ones((n_k, world))
            for i, kind in enumerate(plan.kinds):
                if kind.domain in fx.comm_group_mul:
                    link[i] = group_max(fx.comm_group_mul[kind.domain], gids[kind.domain])
            tokens_mul = None
            if self.traits.variable_length:
                per_replica = np.clip(length_rng.lognormal(-0.5 * VARIABLE_LENGTH_SIGMA**2, VARIABLE_LENGTH_SIGMA,
                                                          topo.dp), 0.8, 1.2)
                tokens_mul = per_replica[replica]
            per_call = call_ns * noise_k * fx.kernel_mul * link * g * warm
            if tokens_mul is not None:
                per_call = np.where(compute_k[:, None], per_call * tokens_mul, per_call)
            k_total = k_count * per_call
            # --- phases (ms) ---------------------------------------------------------------
            other = plan.other_ns * noise_k[0] / 1e6 + fx.other_add_ms
            fwd = (k_total[fwd_c].sum(axis=0) + 0.5 * k_total[fb_comm].sum(axis=0)) / 1e6 + 0.5 * other
            bwd = (k_total[bwd_c].sum(axis=0) + 0.5 * k_total[fb_comm].sum(axis=0)) / 1e6 + 0.5 * other
            if nz.eval_every and step and step % nz.eval_every == 0:
                fwd = fwd * (1.0 + nz.eval_factor)
            compute_ms = k_total[fwd_c | bwd_c].sum(axis=0) / 1e6
            data = nz.data_ms * rng.lognormal(mu, sigma, world) + k_total[data_k].sum(axis=0) / 1e6
            data += (rng.random(world) < nz.hiccup_p) * rng.exponential(nz.hiccup_ms, world)
            opt = nz.optimizer_frac * compute_ms * rng.lognormal(mu, sigma, world) + k_total[opt_k].sum(axis=0) / 1e6
            gc_hit = rng.random(world) < nz.gc_p
            gc = 0.6 * rng.lognormal(mu, sigma, world) + gc_hit * rng.gamma(4.0, nz.gc_ms / 4.0, world)
            gc_count = 1 + gc_hit.astype(np.int64) + fx.gc_count_add
            inter = nz.interstep_ms * rng.lognormal(mu, sigma, world)
            if nz.checkpoint_every and step and step % nz.checkpoint_every == 0:
                inter = inter + nz.checkpoint_ms * fx.checkpoint_mul
                write_left_ms = nz.checkpoint_write_ms * fx.checkpoint_mul
            elif write_left_ms > 0.0 and nominal_ms is not None:
                # the writer thread's share of the host: the step's host-side work grows by that share
                extra = nz.checkpoint_write_slowdown * nominal_ms
                inter = inter + extra
                write_left_ms -= nominal_ms + extra
            phases = {"data_ms": data, "forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": opt, "gc_ms": gc,
                      "interstep_cpu_ms": inter}
            if self.traits.heavy_tail:
                for name, stalls in heavy_tail_stalls(tail_rng, world).items():
                    phases[name] = phases[name] + stalls
            for name, arr in fx.phase_mul.items():
                phases[name] = phases[name] * arr
            for name, arr in fx.phase_add.items():
                phases[name] = phases[name] + arr
            busy = np.sum([phases[p] for p in BUSY_PHASES], axis=0)
            # --- synchronisation -----------------------------------------------------------
            slowest = float(busy.max())
            tp_wait = group_max(busy, gids["tp"]) - busy if "tp" in domains else np.zeros(world)
            dp_wait = slowest - busy - tp_wait
            bubble = (topo.pp - 1) / (self.model.microbatches * self.model.virtual_stages) * float(
                (fwd + bwd).max()) if topo.pp > 1 else 0.0
            sendrecv = 0.0
            if send_i is not None and recv_i is not None:
                sendrecv = float((k_total[send_i] + k_total[recv_i]).max()) / 1e6 * 0.5
            dp_exposed = float(k_total[dp_i].max()) / 1e6 / 4.0 if dp_i is not None else 0.0
            ep_exposed = float(k_total[ep_i].max()) / 1e6 * EP_EXPOSED if ep_i is not None else 0.0
            tail = bubble + sendrecv + dp_exposed + ep_exposed + fx.stall_ms
            duration = slowest + tail
            phases["comm_exposed_ms"] = duration - busy
            wait_ns = np.zeros((n_k, world))
            if self.traits.collective_wait:
                wait_ns = self._collective_waits(busy, k_total, gids)
                k_total = k_total + wait_ns
                if dp_i is not None:
                    k_total[dp_i] += fx.stall_ms * 1e6
            else:
                if tp_i is not None:
                    k_total[tp_i] += tp_wait * 1e6
                if dp_i is not None:
                    k_total[dp_i] += np.maximum(dp_wait, 0.0) * 1e6 + fx.stall_ms * 1e6
            if recv_i is not None:
                k_total[recv_i] += bubble * 1e6
            if nominal_ms is None and step - self.first_step >= nz.warmup_steps:
                nominal_ms = duration
            completed = not fx.halted
            if fx.halted:
                halted_since = step if halted_since is None else halted_since
                duration = nominal_ms or duration
            end_ns = start_ns + round(duration * 1e6)
            # --- device ticks ----------------------------------------------------------------
            util = np.clip(compute_ms / duration, 0.0, 1.0) if completed else np.where(fx.silent, 0.0, 0.97)
            ticks: list[DeviceTick] = []
            while next_tick < end_ns:
                dt = tick_ns / 1e9
                load = np.minimum(util * 100.0 * (0.97 + 0.03 * rng.random(world)), fx.aicore_cap)
                load = np.where(np.isnan(fx.aicore_set), load, fx.aicore_set)
                power = (hw.idle_w + (hw.max_w - hw.idle_w) * (load / 100.0) ** 0.9) * fx.power_mul
                if not completed:
                    power = np.where(fx.silent, hw.idle_w, hw.idle_w + 0.35 * (hw.max_w - hw.idle_w))
                power = power * rng.lognormal(-0.0002, 0.02, world)
                target = hw.ambient_c + hw.c_per_w * power + fx.temp_add
                temp = temp + (target - temp) * (1.0 - np.exp(-dt / 20.0))
                ticks.append(DeviceTick(
                    ts_ns=next_tick, power_w=power, temp_c=temp + rng.normal(0.0, 0.2, world), aicore_pct=load,
                    aicpu_pct=np.clip(3.0 + fx.cpu_add * 0.2 + rng.random(world), 0, 100),
                    ctrlcpu_pct=np.clip(12.0 + fx.cpu_add + 2.0 * rng.random(world), 0, 100),
                    mem_pct=np.clip(mem_base + fx.mem_add + fx.frag_add + rng.normal(0, 0.3, world)
                                    + nz.mem_sawtooth_pct * (next_tick - start_ns) / max(end_ns - start_ns, 1),
                                    0, 100),
                    membw_pct=np.clip(55.0 * (load / 90.0) * fx.membw_mul + rng.normal(0, 1.0, world), 0, 100),
                    freq_mhz=hw.freq_mhz * fx.freq_mul, reporting=~fx.device_silent))
                next_tick += tick_ns
            longest = np.minimum(per_call * 1.15 + wait_ns / np.maximum(k_count, 1), k_total)  # waits spread over calls
            launch_mean = hw.launch_us * fx.launch_mul * rng.lognormal(mu, sigma, world)
            launch_mad = hw.launch_mad_us * fx.launch_mad_mul * rng.lognormal(mu, sigma, world)
            yield StepFrame(
                step=step, start_ns=start_ns, end_ns=end_ns, completed=completed, phases=phases, gc_count=gc_count,
                reporting=~fx.silent & completed, k_count=k_count, k_total_ns=k_total,
                k_max_ns=longest, k_wait_ns=wait_ns, k_bytes=k_count * np.array(
                    [k.bytes for k in plan.kinds])[:, None] * fx.bytes_mul,
                launch_mean_us=launch_mean, launch_mad_us=launch_mad, other_ns=other * 1e6, ticks=ticks, effects=fx,
                tokens_mul=tokens_mul, **(alloc.step(fx, nz.mem_sawtooth_pct) if alloc is not None else {}))
            start_ns = end_ns
