"""Detection quality against the simulator's ground truth (pure: sets in, scores out)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Score:
    """Precision/recall of one detected set against the injected set."""

    truth: frozenset[int]
    found: frozenset[int]

    @property
    def hits(self) -> frozenset[int]:
        return self.truth & self.found

    @property
    def missed(self) -> frozenset[int]:
        return self.truth - self.found

    @property
    def false_alarms(self) -> frozenset[int]:
        return self.found - self.truth

    @property
    def precision(self) -> float:
        return len(self.hits) / len(self.found) if self.found else (1.0 if not self.truth else 0.0)

    @property
    def recall(self) -> float:
        return len(self.hits) / len(self.truth) if self.truth else 1.0


def score(truth: set[int] | frozenset[int], found: set[int] | frozenset[int]) -> Score:
    return Score(frozenset(truth), frozenset(found))


def steps_in_ranges(ranges: list[tuple[int, int]]) -> set[int]:
    return {s for first, last in ranges for s in range(first, last + 1)}
