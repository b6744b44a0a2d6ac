"""A finding: one cause, the evidence it rests on, and where (rank, step)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.detect.advice import Advice, advise_cause


@dataclass(frozen=True, slots=True)
class Finding:
    cause: str  # key of the advice table (streams/detect/advice.py CAUSES)
    summary: str
    evidence: dict[str, float] = field(default_factory=dict)
    rank: int | None = None
    step: int | None = None
    severity: str = "warning"

    @property
    def advice(self) -> Advice:
        return advise_cause(self.cause)

    def evidence_text(self) -> str:
        return ", ".join(f"{k}={v:.4g}" for k, v in self.evidence.items())
