"""Commands back to the ranks: coarse-to-fine profiling without restarting training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from schemas.decoding import join, require

ControlAction = Literal["profile_on", "profile_off"]
ProfileLevel = Literal["level0", "level1", "level2"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlCommand:
    """Switch detailed profiling on (or off) for `ranks` over steps [step_first, step_first + step_count).

    An empty `ranks` list means every rank of the job. `incident_id` links to the reason.
    """

    TYPE: ClassVar[str] = "control"

    command_id: str
    job: str
    action: ControlAction
    ranks: list[int]
    step_first: int
    step_count: int
    issued_ns: int
    level: ProfileLevel = "level1"
    reason: str = ""
    incident_id: str | None = None

    def check(self, path: str) -> None:
        require(bool(self.command_id), join(path, "command_id"), "must not be empty")
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(self.step_first >= 0, join(path, "step_first"), "must be >= 0")
        require(self.step_count >= 1, join(path, "step_count"), "must be >= 1")
        require(all(r >= 0 for r in self.ranks), join(path, "ranks"), "ranks must be >= 0")
