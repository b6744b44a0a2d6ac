"""Job lifecycle: lets workers know a job's shape up front and flush its state at the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from schemas.decoding import join, require

JobPhase = Literal["start", "end"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """Emitted once at job start and once at job end (topic steplens.jobs).

    parallel: domain sizes, e.g. {"dp": 8, "tp": 4, "pp": 2}.
    last_step: at `end`, the last step index every rank completed.
    kernel_summaries (contract 1.3): at `start`, whether every rank sends a `kernel_summary`
    per step. Detection then knows to await them even when a backlog delivers a job's step
    events long before its summaries (they travel on separate topics); None: not declared,
    learned from the summaries that arrive.
    attempt (contract 1.4): which launch of the job this is, 0 for the first; a relaunch under
    the same job id (after a crash, from a checkpoint, maybe with fewer hosts) counts up. The
    hook takes it from the launcher's restart count (TORCHELASTIC_RESTART_COUNT).
    """

    TYPE: ClassVar[str] = "job"

    job: str
    phase: JobPhase
    world: int
    ts_ns: int
    parallel: dict[str, int] = field(default_factory=dict)
    last_step: int | None = None
    model: str | None = None
    kernel_summaries: bool | None = None
    attempt: int = 0

    def check(self, path: str) -> None:
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(self.world >= 1, join(path, "world"), "must be >= 1")
        require(self.last_step is None or self.last_step >= 0, join(path, "last_step"), "must be >= 0")
