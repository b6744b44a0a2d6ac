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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True, slots=True)
class Traits:
    collective_wait: bool = True

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
