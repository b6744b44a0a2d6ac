"""producers/hook/commands.py: which control commands a rank takes, and the profiling they start and stop.

Through the hook (the in-memory exporter stands in for Kafka), and ProfileCommands alone by hand.
"""

from __future__ import annotations

from pathlib import Path

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook.commands import NO_PROFILER, OTHER_JOB, OTHER_RANK, PAST_STEPS, UNSUPPORTED, ProfileCommands
from producers.hook.core import RankHook
from producers.hook.identity import RankInfo
from producers.hook.profiling import ProfileRequest, ProfileResult
from schemas import ControlCommand, Domain, KernelBatch, KernelRecord, ProfileReady, StepEvent, decode

RANK = RankInfo(job="job-u", rank=1, world=4, host="node-0", device=1, domains={"dp": Domain(group=0, size=4, index=1)})


def cmd(cid: str, ranks: list[int], first: int, count: int, job: str = "job-u") -> ControlCommand:
    return ControlCommand(command_id=cid, job=job, action="profile_on", ranks=ranks, step_first=first,
                          step_count=count, issued_ns=1)


class _ListProfiler:
    """A profiler backend that records one synthetic kernel per step (the torch one is tested for real)."""

    def __init__(self, req: ProfileRequest) -> None:
        self.req = req
        self.steps: list[int] = []
        self.started: int | None = None

    def start(self, step: int) -> None:
        self.started = step
        self.req.out_dir.mkdir(parents=True)

    def step(self, step: int) -> None:
        self.steps.append(step)

    def stop(self) -> ProfileResult:
        dump = self.req.out_dir / "trace.json"
        dump.write_text("{}")
        kernels = {s: [KernelRecord(name="k", cat="compute", start_ns=1, dur_ns=5)] for s in self.steps}
        return ProfileResult(format="kineto", uri=dump, nbytes=2, kernels=kernels)


def test_control_commands_profile_exactly_the_requested_steps(tmp_path: Path) -> None:
    exporter = InMemoryExporter()
    hook = RankHook(RANK, lambda: BackgroundEmitter(exporter), profiler_factory=_ListProfiler, profile_root=tmp_path)
    for _ in range(3):
        with hook.step():
            pass
    assert not hook.submit_command(cmd("c-other", [2], 5, 3))
    assert not hook.submit_command(cmd("c-job", [1], 5, 3, job="job-v"))
    assert not hook.submit_command(cmd("c-past", [1], 0, 2))
    assert hook.submit_command(cmd("c-mine", [1], 5, 3))
    for _ in range(10):
        with hook.step():
            pass
    assert hook.flush(10)
    events = [decode(v) for v in exporter.values()]
    batches = [e for e in events if isinstance(e, KernelBatch)]
    (pointer,) = [e for e in events if isinstance(e, ProfileReady)]
    assert [b.step for b in batches] == [5, 6, 7]
    assert (pointer.step_first, pointer.step_last, pointer.command_id) == (5, 7, "c-mine")
    assert Path(pointer.uri).exists()
    profiled = [e.step for e in events if isinstance(e, StepEvent) and e.profiling]
    assert profiled == [5, 6, 7]
    stats = hook.stats()
    assert stats.commands_accepted == 1 and stats.profiles == 1
    assert stats.commands_ignored == {OTHER_RANK: 1, OTHER_JOB: 1, PAST_STEPS: 1}
    hook.close()


def test_profile_commands_by_hand(tmp_path: Path) -> None:
    """A request whose steps pass before it could start is counted as past_steps when the next step begins;
    one that starts late profiles from the step it starts at, to its last step, then stops."""
    made: list[_ListProfiler] = []

    def factory(req: ProfileRequest) -> _ListProfiler:
        made.append(_ListProfiler(req))
        return made[-1]

    commands = ProfileCommands(factory)
    assert not commands.submit(ControlCommand(command_id="off", job="job-u", action="profile_off", ranks=[],
                                              step_first=0, step_count=1, issued_ns=1), RANK, 0, tmp_path)
    assert commands.submit(cmd("early", [], 2, 1), RANK, 0, tmp_path)
    assert commands.submit(cmd("c/1", [1], 4, 3), RANK, 0, tmp_path)
    no_profiler = ProfileCommands(None)
    assert not no_profiler.submit(cmd("c", [], 4, 3), RANK, 0, tmp_path)
    assert no_profiler.counts() == (0, {NO_PROFILER: 1})
    commands.start_due(5)  # step 2 is gone: "early" is dropped; "c/1" starts at 5, not 4
    assert commands.active is not None
    req, prof = commands.active
    assert prof is made[0]
    assert (req.step_first, req.step_last) == (5, 6) and made[0].started == 5
    assert req.out_dir == tmp_path / "job-u" / "rank1" / "c_1"  # the command id made a safe directory name
    assert commands.step_end(5) is None and commands.active is not None
    finished = commands.step_end(6)
    assert finished is not None and finished[0] == req and commands.active is None
    assert sorted(finished[1].kernels) == [5, 6]
    assert commands.counts() == (2, {UNSUPPORTED: 1, PAST_STEPS: 1})
