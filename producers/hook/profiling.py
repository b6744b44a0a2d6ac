"""The seam between the hook and a detailed profiler switched on by a control command.

A backend (torch.profiler/Kineto, torch_npu.profiler, MindSpore's Profiler) is started at the
first requested step, told about every step end, and stopped after the last one; it returns
the dump's location and the step's kernels as contract `KernelRecord`s.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from schemas.control import ProfileLevel
from schemas.kernel import KernelRecord
from schemas.profile import ProfileFormat


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    """Profile steps [step_first, step_last] into `out_dir` (asked for by `command_id`)."""

    command_id: str
    step_first: int
    step_last: int
    level: ProfileLevel
    out_dir: Path


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """What a stopped profiler produced: the dump and the kernels per step."""

    format: ProfileFormat
    uri: Path
    nbytes: int | None
    kernels: dict[int, list[KernelRecord]] = field(default_factory=dict)
    dropped: dict[int, int] = field(default_factory=dict)


class ProfilerBackend(Protocol):
    def start(self, step: int) -> None: ...

    def step(self, step: int) -> None:
        """Called after `step` ended while profiling."""
        ...

    def stop(self) -> ProfileResult: ...


def dump_bytes(path: Path) -> int:
    """Size of a dump file or directory tree."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total
