"""Traits of real clusters the simulator reproduces, each switchable so the old ruler can be compared.

A trait is behaviour that real training jobs show and that detection must cope with (issue
#21): it is on by default wherever it is real, and `make bench-detection` records which traits
were on (`detection.json` `traits`). Turning one off gives the simulator's earlier, simpler
behaviour, so a detector's figures can be compared on both rulers.

- `collective_wait`: a collective kernel starts when its rank launches it and spins until the
  last peer of the group arrives (NCCL/HCCL), so its device time is the rank's wait for that
  peer plus the transfer; the last arriver's kernel is about the transfer alone. Applied to
  every collective the simulator emits: TP, CP and EP (per layer), PP send/recv and the DP
  gradient all-reduce (`producers.simulator.waits`). Off: only the TP all-reduce carries its
  TP group's wait and the DP all-reduce the rest up to the job's slowest rank.
- `variable_length`: data-dependent work. Each data-parallel replica's batch holds a different
  number of tokens each step (variable sequence lengths, packing that does not fill every
  sequence), so its compute kernels, its FLOPs and the tokens it reports vary step to step
  (lognormal, sigma `VARIABLE_LENGTH_SIGMA` = 3 %, within ±20 %), and the replica the others wait for
  moves from step to step. Off: every replica computes the same tokens every step.
- `heavy_tail`: healthy noise with a heavy tail. Now and then a rank-step loses a Pareto-sized
  stretch (alpha `HEAVY_TAIL_ALPHA`, from `HEAVY_TAIL_MIN_MS`, capped at `HEAVY_TAIL_CAP_MS`) in
  its data loading, forward pass (host side) or inter-step CPU work: page-cache misses, OS noise, a retransmit, a
  filesystem stall. Off: the exponential hiccups and gamma GC pauses of `Noise` alone.
- `clock_offset`: hosts' clocks disagree (NTP/chrony keep them within milliseconds, not
  nanoseconds): every host has its own offset (normal, sigma `CLOCK_OFFSET_SIGMA_MS`), added to
  its ranks' step `start_ns`/`end_ns` and its devices' `ts_ns`; and each host's device agent
  samples at its own phase within the sampling interval (uniform: every agent started at its own
  moment), so one second's samples of a job span up to a second. Off: one clock and one
  sampling instant for all hosts.
- `allocator_stats`: each step event carries the device allocator's statistics (contract 1.5, as
  the PyTorch / torch_npu hook reads them): the step's peak allocated bytes, the caching
  allocator's reserved bytes and the device's capacity (`producers.simulator.fleet.AllocatorModel`).
  Off: step events without memory fields (a 1.4 producer, MindSpore without them).

Several jobs at once through the same workers is not a switch: the bench always streams every
run interleaved through one pipeline (`producers.simulator.stream.stream_runs`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

VARIABLE_LENGTH_SIGMA = 0.03  # packed sequences, document masking: attention work varies a few %
HEAVY_TAIL_P = 0.004  # per rank-step
HEAVY_TAIL_ALPHA = 1.5
HEAVY_TAIL_MIN_MS = 15.0
HEAVY_TAIL_CAP_MS = 2_000.0
CLOCK_OFFSET_SIGMA_MS = 5.0


@dataclass(frozen=True, slots=True)
class Traits:
    collective_wait: bool = True
    variable_length: bool = True
    heavy_tail: bool = True
    clock_offset: bool = True
    allocator_stats: bool = True

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def without(self, names: list[str] | tuple[str, ...]) -> Traits:
        """These traits turned off (unknown names are an error: a typo must not pass as a comparison)."""
        unknown = set(names) - set(self.names())
        if unknown:
            raise ValueError(f"unknown trait(s) {sorted(unknown)}; known: {', '.join(self.names())}")
        return replace(self, **dict.fromkeys(names, False))
