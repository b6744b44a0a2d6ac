"""What was injected into a simulated run, so detector output can be scored against it.

The faults are the catalogue's `FaultSpec`s, written as its JSONL ground truth (one line per
fault, `FaultSpec.to_dict`, the end step resolved against the run's length), the same file
bench-detection scores. Which detector output a fault calls for is in its `rules`: a
`SLOW_RANK` fault names ranks a slow-rank detector must find (`slow_ranks()`), a `SLOW_STEP`
fault the steps a slow-step detector must flag (`slow_steps()`). A straggler present from
step 0 makes every step equally slower, so it is no slow step at all: it is only visible by
comparing ranks inside their communication domains, like the straggler Hermes found that
had been there all along.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # catalogue.py imports nothing of this module: types only, no import cycle
    from producers.simulator.catalogue import FaultSpec


@dataclass(frozen=True, slots=True)
class GroundTruth:
    """A simulated run's identity and its injected faults, as ground-truth lines."""

    job: str
    seed: int
    steps: int
    faults: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, job: str, faults: Iterable[FaultSpec], seed: int, steps: int) -> GroundTruth:
        return cls(job=job, seed=seed, steps=steps, faults=[f.to_dict(job, seed, steps) for f in faults])

    def _expecting(self, rule: str) -> list[dict[str, Any]]:
        return [f for f in self.faults if rule in f["rules"]]

    def slow_ranks(self) -> set[int]:
        """Ranks a slow-rank detector must name."""
        return {int(r) for f in self._expecting("SLOW_RANK") for r in f["ranks"]}

    def slow_steps(self) -> set[int]:
        """Steps a slow-step detector must flag (every step of each such fault's window)."""
        return {s for f in self._expecting("SLOW_STEP") for s in _window(f)}

    def slow_rank_steps(self) -> dict[int, set[int]]:
        """For each slow rank, the steps on which it is slow."""
        out: dict[int, set[int]] = {}
        for f in self._expecting("SLOW_RANK"):
            for r in f["ranks"]:
                out.setdefault(int(r), set()).update(_window(f))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "seed": self.seed, "steps": self.steps, "faults": self.faults}

    def write(self, path: Path) -> Path:
        """The JSONL ground truth, written atomically (readers never see half a file); returns `path`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(orjson.dumps(f) + b"\n" for f in self.faults))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path, job: str, seed: int, steps: int) -> GroundTruth:
        """A JSONL ground truth back; the run's identity comes from the caller (a healthy run's file is empty)."""
        return cls(job=job, seed=seed, steps=steps, faults=read_ground_truth(Path(path)))


def _window(fault: dict[str, Any]) -> range:
    """The steps of one ground-truth line's window (both ends included)."""
    return range(int(fault["start_step"]), int(fault["end_step"]) + 1)


def write_ground_truth(path: Path, faults: list[FaultSpec], job: str, seed: int, total_steps: int) -> Path:
    """One JSON line per fault (an empty file for a healthy run), written as `GroundTruth.write` does."""
    return GroundTruth.of(job, faults, seed, total_steps).write(path)


def read_ground_truth(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
