"""What was injected into a simulated run, so detector output can be scored against it.

Written as JSON next to the run. `slow_steps()` are exactly the steps where a slow-step fault
adds time. A straggler present from step 0 makes every step equally slower, so it is not a
slow step at all: it is only visible by comparing ranks inside their communication domains
(`slow_ranks()`), like the straggler Hermes found that had been there all along.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from producers.simulator.faults import InjectedFault

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """A simulated job's identity, shape and injected faults."""

    job: str
    topology: dict[str, int]
    steps: int
    seed: int
    start_ns: int
    faults: list[InjectedFault] = field(default_factory=list)

    def slow_ranks(self) -> set[int]:
        """Ranks a slow-rank detector must name."""
        return {r for f in self.faults if f.effect == "slow_rank" for r in (f.ranks or [])}

    def slow_steps(self) -> set[int]:
        """Steps a slow-step detector must flag."""
        return {s for f in self.faults if f.effect == "slow_step" for s in f.steps}

    def slow_rank_steps(self) -> dict[int, set[int]]:
        """For each slow rank, the steps on which it is slow."""
        out: dict[int, set[int]] = {}
        for f in self.faults:
            if f.effect == "slow_rank":
                for r in f.ranks or []:
                    out.setdefault(r, set()).update(f.steps)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION, "job": self.job, "topology": self.topology, "steps": self.steps,
            "seed": self.seed, "start_ns": self.start_ns, "faults": [f.to_dict() for f in self.faults],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroundTruth:
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported ground-truth format {data.get('format')!r}")
        return cls(
            job=str(data["job"]), topology={k: int(v) for k, v in data["topology"].items()},
            steps=int(data["steps"]), seed=int(data["seed"]), start_ns=int(data["start_ns"]),
            faults=[InjectedFault.from_dict(f) for f in data["faults"]],
        )

    def write(self, path: Path) -> Path:
        """Write atomically (readers never see half a file); returns `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> GroundTruth:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: ground truth must be a JSON object")
        return cls.from_dict(data)
