"""Control commands on a rank: which are for it, and when the profiling they ask for starts, stops and what it sends.

Why apart: commands arrive on a control follower's thread (producers/hook/control.py) while steps
run on the training thread. The queue of requests, the accept/ignore counts and the one active
profiler live here, under their own lock, so the hook's step path only checks whether a request
waits or a profiler runs; each reason a command is ignored is counted, never raised.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from producers.hook.identity import RankInfo
from producers.hook.profiling import ProfilerBackend, ProfileRequest, ProfileResult
from schemas import ControlCommand, Event, KernelBatch, ProfileReady

# Reasons a control command is not acted on (keys of HookStats.commands_ignored).
OTHER_JOB = "other_job"
OTHER_RANK = "other_rank"
PAST_STEPS = "past_steps"
UNSUPPORTED = "unsupported"
NO_PROFILER = "no_profiler"


class ProfileCommands:
    """Profiling requests for one rank: queued by `submit`, started by `start_due` at a step's begin,
    stepped and stopped by `step_end`. `profiler_factory` None: every profiling command is ignored
    as `no_profiler`."""

    def __init__(self, profiler_factory: Callable[[ProfileRequest], ProfilerBackend] | None) -> None:
        self._profiler_factory = profiler_factory
        self._lock = threading.Lock()
        self.requests: deque[ProfileRequest] = deque()
        self._accepted = 0
        self._ignored: dict[str, int] = {}
        self.active: tuple[ProfileRequest, ProfilerBackend] | None = None

    def submit(self, cmd: ControlCommand, rank: RankInfo, next_step: int, profile_root: Path) -> bool:
        """Called from the control thread: queue a profiling request for this rank, or count why not."""
        reason: str | None = None
        if cmd.job != rank.job:
            reason = OTHER_JOB
        elif cmd.ranks and rank.rank not in cmd.ranks:
            reason = OTHER_RANK
        elif cmd.action != "profile_on":
            reason = UNSUPPORTED
        elif self._profiler_factory is None:
            reason = NO_PROFILER
        elif cmd.step_first + cmd.step_count - 1 < next_step:
            reason = PAST_STEPS
        with self._lock:
            if reason is not None:
                self._ignored[reason] = self._ignored.get(reason, 0) + 1
                return False
            self._accepted += 1
            self.requests.append(ProfileRequest(
                command_id=cmd.command_id, step_first=cmd.step_first,
                step_last=cmd.step_first + cmd.step_count - 1, level=cmd.level,
                out_dir=profile_root / rank.job / f"rank{rank.rank}" / _safe(cmd.command_id),
            ))
        return True

    def counts(self) -> tuple[int, dict[str, int]]:
        """Commands accepted, and ignored per reason."""
        with self._lock:
            return self._accepted, dict(self._ignored)

    def start_due(self, idx: int) -> None:
        """Step `idx` begins: drop requests already past, start the first one that covers it."""
        with self._lock:
            while self.requests and self.requests[0].step_last < idx:
                self.requests.popleft()
                self._ignored[PAST_STEPS] = self._ignored.get(PAST_STEPS, 0) + 1
            if not self.requests or self.requests[0].step_first > idx:
                return
            req = self.requests.popleft()
        if self._profiler_factory is None:
            return
        first = max(req.step_first, idx)
        req = ProfileRequest(command_id=req.command_id, step_first=first, step_last=req.step_last,
                             level=req.level, out_dir=req.out_dir)
        prof = self._profiler_factory(req)
        prof.start(idx)
        self.active = (req, prof)

    def step_end(self, step: int) -> tuple[ProfileRequest, ProfileResult] | None:
        """Step `step` of the active profile ended: its request and result once that was the last one."""
        active = self.active
        if active is None:
            return None
        req, prof = active
        prof.step(step)
        if step < req.step_last:
            return None
        self.active = None
        return req, prof.stop()

    def after_fork(self) -> None:
        """A forked child owns no profiler of the parent's, and the lock may have been held."""
        self._lock = threading.Lock()
        self.active = None


def profile_events(req: ProfileRequest, result: ProfileResult, r: RankInfo) -> Iterator[Event]:
    """A finished profile's events: each profiled step's kernels, then the pointer to the dump."""
    for step in range(req.step_first, req.step_last + 1):
        kernels = result.kernels.get(step, [])
        yield KernelBatch(job=r.job, rank=r.rank, world=r.world, host=r.host, device=r.device,
                          domains=r.domains, step=step, kernels=kernels, dropped=result.dropped.get(step, 0))
    yield ProfileReady(job=r.job, rank=r.rank, host=r.host, format=result.format, uri=str(result.uri),
                       step_first=req.step_first, step_last=req.step_last, ts_ns=time.time_ns(),
                       bytes=result.nbytes, command_id=req.command_id)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120] or "profile"


__all__ = ["NO_PROFILER", "OTHER_JOB", "OTHER_RANK", "PAST_STEPS", "UNSUPPORTED", "ProfileCommands", "profile_events"]
