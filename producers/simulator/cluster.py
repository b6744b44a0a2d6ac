"""A deterministic synchronous-training cluster: per-rank StepEvents with known injected faults.

Timing model (one step, vectorised over ranks with numpy):

    busy_r      = data + forward + backward + optimizer + gc + interstep_cpu   (noisy, faults applied)
    step end    = step start + max_r(busy_r) + comm                           (the collective waits
                                                                               for the slowest rank)
    comm_exposed_r = (max_r busy - busy_r) + comm                             (time rank r waits)

so every rank's phases add up to the step duration, the slowest rank has the least exposed
communication, and the next step starts when this one ends. The same seed gives the same
events, so detector tests can assert exact outcomes against the ground truth.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from producers.simulator.faults import BUSY_PHASES, Fault, FloatArray, IntArray, StepState
from producers.simulator.ground_truth import GroundTruth
from producers.simulator.topology import Topology
from schemas import JobEvent, Phases, StepEvent

DEFAULT_START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True, slots=True)
class Timings:
    """Healthy per-step phase times in ms, and the lognormal noise (sigma) applied to each."""

    data_ms: float = 20.0
    forward_ms: float = 120.0
    backward_ms: float = 240.0
    optimizer_ms: float = 30.0
    gc_ms: float = 0.0
    interstep_cpu_ms: float = 2.0
    comm_ms: float = 40.0
    noise: float = 0.015

    def base(self, phase: str) -> float:
        value: float = getattr(self, phase)
        return value

    @property
    def nominal_step_ms(self) -> float:
        return sum(self.base(p) for p in BUSY_PHASES) + self.comm_ms


@dataclass(frozen=True, slots=True)
class Workload:
    """What one rank processes per step, for throughput and MFU fields.

    flops per rank-step is set so a healthy step runs at `mfu` of `peak_flops` (plausible for
    any topology); slow steps then show a lower MFU, as they would on a real cluster.
    """

    seq_len: int = 4096
    micro_batch: int = 1
    num_microbatches: int = 8
    peak_flops: float = 989e12  # dense BF16 of an H100-class device
    mfu: float = 0.40
    model: str = "sim-gpt-7b"

    @property
    def samples(self) -> int:
        return self.micro_batch * self.num_microbatches

    @property
    def tokens(self) -> int:
        return self.samples * self.seq_len


@dataclass(frozen=True, slots=True)
class SimStep:
    """One simulated step as arrays over ranks (ms), before it becomes StepEvents."""

    step: int
    start_ns: int
    end_ns: int
    phases: dict[str, FloatArray]  # BUSY_PHASES plus comm_exposed_ms
    busy_ms: FloatArray
    gc_count: IntArray
    comm_ms: float

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


class SimulatedJob:
    """A training job of `topology.world` ranks running `steps` steps with `faults` injected.

    A relaunch (contract 1.4) is another SimulatedJob of the same id with `attempt` counted up
    and `first_step` at its checkpoint: it runs steps first_step .. steps - 1, all its events
    carry the attempt.
    """

    def __init__(
        self,
        job_id: str,
        topology: Topology,
        steps: int,
        faults: Sequence[Fault] = (),
        seed: int = 0,
        *,
        timings: Timings | None = None,
        workload: Workload | None = None,
        start_ns: int = DEFAULT_START_NS,
        attempt: int = 0,
        first_step: int = 0,
    ) -> None:
        if steps < 1:
            raise ValueError("steps must be >= 1")
        if not 0 <= first_step < steps:
            raise ValueError("first_step must be in [0, steps)")
        self.attempt = attempt
        self.first_step = first_step
        self.job_id = job_id
        self.topology = topology
        self.steps = steps
        self.faults = tuple(faults)
        self.seed = seed
        self.timings = timings or Timings()
        self.workload = workload or Workload()
        self.start_ns = start_ns
        for fault in self.faults:
            fault.check(topology.world)
        world = topology.world
        self._hosts = [topology.host(r) for r in range(world)]
        self._devices = [topology.device(r) for r in range(world)]
        self._domains = [topology.domains(r) for r in range(world)]
        self._flops = self.workload.mfu * self.workload.peak_flops * self.timings.nominal_step_ms / 1e3

    @property
    def world(self) -> int:
        return self.topology.world

    def iter_arrays(self) -> Iterator[SimStep]:
        """The timing model, one step at a time (a fresh RNG each call: same seed, same numbers)."""
        rng = np.random.default_rng(self.seed)
        world = self.world
        sigma = self.timings.noise
        mu = -0.5 * sigma * sigma  # mean-one lognormal
        start_ns = self.start_ns
        for step in range(self.first_step, self.steps):
            noise = rng.lognormal(mu, sigma, size=(len(BUSY_PHASES), world))
            phases: dict[str, FloatArray] = {
                name: self.timings.base(name) * noise[i] for i, name in enumerate(BUSY_PHASES)
            }
            comm = self.timings.comm_ms * float(rng.lognormal(mu, sigma))
            state = StepState(step=step, phases=phases, gc_count=np.zeros(world, dtype=np.int64), comm_ms=comm)
            for fault in self.faults:
                if fault.covers(step):
                    fault.apply(state)
            busy = np.sum([state.phases[name] for name in BUSY_PHASES], axis=0)
            slowest = float(busy.max())
            out = dict(state.phases)
            out["comm_exposed_ms"] = (slowest - busy) + state.comm_ms
            end_ns = start_ns + round((slowest + state.comm_ms) * 1e6)
            yield SimStep(step=step, start_ns=start_ns, end_ns=end_ns, phases=out, busy_ms=busy,
                          gc_count=state.gc_count, comm_ms=state.comm_ms)
            start_ns = end_ns

    def iter_steps(self) -> Iterator[list[StepEvent]]:
        """All ranks' StepEvents, one list per step, in rank order."""
        wl = self.workload
        world = self.world
        for sim in self.iter_arrays():
            cols = {name: arr.tolist() for name, arr in sim.phases.items()}
            gc = sim.gc_count.tolist()
            yield [
                StepEvent(
                    job=self.job_id, rank=r, world=world, host=self._hosts[r], device=self._devices[r],
                    domains=self._domains[r], step=sim.step, start_ns=sim.start_ns, end_ns=sim.end_ns,
                    phases=Phases(
                        data_ms=cols["data_ms"][r], forward_ms=cols["forward_ms"][r],
                        backward_ms=cols["backward_ms"][r], optimizer_ms=cols["optimizer_ms"][r],
                        comm_exposed_ms=cols["comm_exposed_ms"][r],
                        interstep_cpu_ms=cols["interstep_cpu_ms"][r], gc_ms=cols["gc_ms"][r],
                    ),
                    gc_count=gc[r], batch_size=wl.micro_batch, samples=wl.samples, tokens=wl.tokens,
                    flops=self._flops, peak_flops=wl.peak_flops, attempt=self.attempt,
                )
                for r in range(world)
            ]

    def step_durations_ms(self) -> list[float]:
        return [s.duration_ms for s in self.iter_arrays()]

    def end_ns(self) -> int:
        """When the last step ends (runs the timing model, not the event building)."""
        end = self.start_ns
        for sim in self.iter_arrays():
            end = sim.end_ns
        return end

    def job_events(self) -> tuple[JobEvent, JobEvent]:
        """The job's start and end lifecycle events."""
        parallel = self.topology.parallel()
        start = JobEvent(job=self.job_id, phase="start", world=self.world, ts_ns=self.start_ns,
                         parallel=parallel, model=self.workload.model, attempt=self.attempt)
        end = JobEvent(job=self.job_id, phase="end", world=self.world, ts_ns=self.end_ns(),
                       parallel=parallel, last_step=self.steps - 1, model=self.workload.model, attempt=self.attempt)
        return start, end

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            job=self.job_id, topology=self.topology.to_dict(), steps=self.steps, seed=self.seed,
            start_ns=self.start_ns, faults=[f.describe(self.steps) for f in self.faults],
        )
