"""A profile finding: one cause a dump shows, the evidence it rests on, and where (rank, step).

Named apart from the detect stage's `Finding` (a rule's verdict on a live window): the two never meet."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

from streams.advice import Advice, advise_cause


@dataclass(frozen=True, slots=True)
class ProfileFinding:
    cause: str  # key of the advice table (streams/advice.py CAUSES)
    summary: str
    evidence: dict[str, float] = field(default_factory=dict)
    rank: int | None = None
    step: int | None = None
    severity: str = "warning"
    source: str = ""  # the dump it was found in (a trace file, an *_ascend_pt folder, a cluster table)

    @property
    def advice(self) -> Advice:
        return advise_cause(self.cause)

    def where(self) -> str:
        """'rank 2 step 7 (run1.csv)': the place a reader looks, the dump named when there are several."""
        parts = [f"rank {self.rank}" if self.rank is not None else "",
                 f"step {self.step}" if self.step is not None else "",
                 f"({PurePath(self.source).name})" if self.source else ""]
        return " ".join(x for x in parts if x)

    def evidence_text(self) -> str:
        return ", ".join(f"{k}={v:.4g}" for k, v in self.evidence.items())
