"""Pointer to a detailed profiler dump that is ready for asynchronous parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from schemas.decoding import join, require

ProfileFormat = Literal["kineto", "ascend_pt", "msprof"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileReady:
    """A rank finished writing a profile for steps [step_first, step_last] (topic steplens.profiles).

    uri: where the dump is (a local path or a shared-filesystem path readable by workers).
    command_id: the control command that asked for it, to close the coarse-to-fine loop.
    """

    TYPE: ClassVar[str] = "profile"

    job: str
    rank: int
    host: str
    format: ProfileFormat
    uri: str
    step_first: int
    step_last: int
    ts_ns: int
    bytes: int | None = None
    command_id: str | None = None

    def check(self, path: str) -> None:
        require(bool(self.job), join(path, "job"), "must not be empty")
        require(bool(self.host), join(path, "host"), "must not be empty")
        require(bool(self.uri), join(path, "uri"), "must not be empty")
        require(self.step_first >= 0, join(path, "step_first"), "must be >= 0")
        require(self.step_last >= self.step_first, join(path, "step_last"), "must be >= step_first")
