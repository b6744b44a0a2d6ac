"""The framework-agnostic rank hook, driven by hand (pure unit tests: the in-memory exporter stands in for Kafka).

Control commands and profiling: test_commands.py; the step and kernel pieces alone: test_steps.py, test_aggregate.py."""

from __future__ import annotations

import gc
import os

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook.core import RankHook, RankInfo
from schemas import Domain, KernelSummary, StepEvent, decode

RANK = RankInfo(job="job-u", rank=1, world=4, host="node-0", device=1, domains={"dp": Domain(group=0, size=4, index=1)})


def _hook(exporter: InMemoryExporter, **kw: object) -> RankHook:
    return RankHook(RANK, lambda: BackgroundEmitter(exporter), **kw)  # type: ignore[arg-type]


def _events(hook: RankHook, exporter: InMemoryExporter) -> list[object]:
    assert hook.flush(10)
    return [decode(v) for v in exporter.values()]


def test_step_phases_gc_data_and_kernel_summary() -> None:
    exporter = InMemoryExporter()
    hook = _hook(exporter)
    batches = hook.wrap_loader([1, 2, 3])
    for i, _batch in enumerate(batches):
        with hook.step(samples=8, tokens=256):
            with hook.phase("forward"):
                pass
            hook.add_phase_ms("backward", 2.5)
            hook.record_collective("allreduce", 1_000_000, nbytes=4096, domain="dp", group_size=4, launch_us=5.0)
            hook.record_collective("allreduce", 3_000_000, nbytes=4096, domain="dp", group_size=4, launch_us=7.0)
            if i == 1:
                junk: list[object] = []
                junk.append(junk)
                del junk
                gc.collect()
    events = _events(hook, exporter)
    steps = [e for e in events if isinstance(e, StepEvent)]
    summaries = [e for e in events if isinstance(e, KernelSummary)]
    assert [s.step for s in steps] == [0, 1, 2] == [s.step for s in summaries]
    s1 = steps[1]
    assert s1.samples == 8 and s1.tokens == 256 and s1.end_ns >= s1.start_ns
    assert s1.phases.backward_ms == 2.5 and s1.phases.forward_ms is not None and s1.phases.data_ms is not None
    assert s1.gc_count is not None and s1.gc_count >= 1 and (s1.phases.gc_ms or 0) > 0
    assert steps[0].phases.interstep_cpu_ms is None and steps[1].phases.interstep_cpu_ms is not None
    (agg,) = summaries[0].entries
    assert (agg.key, agg.op, agg.count, agg.total_ns, agg.max_ns, agg.bytes) == (
        "allreduce/dp", "allreduce", 2, 4_000_000, 3_000_000, 8192)
    assert agg.launch_mean_us == 7.0 and agg.launch_mad_us == 0.0  # first (cold) call excluded
    assert summaries[1].entries[0].launch_mean_us == 6.0 and summaries[1].entries[0].launch_mad_us == 1.0
    stats = hook.stats()
    assert stats.steps == 3 and stats.events == 6 and stats.errors == 0 and stats.us_per_event > 0
    assert hook.close(10)


def test_a_broken_emitter_never_reaches_the_training_loop() -> None:
    def broken() -> BackgroundEmitter:
        raise RuntimeError("no emitter today")

    hook = RankHook(RANK, broken)
    for _ in range(3):
        with hook.step():
            hook.record_kernel("F2:8x8x8", "compute", 10, metric="F2", flops=1024.0)
    hook.step_end()  # unbalanced end: ignored
    hook.flush(10)
    assert hook.stats().errors >= 3 and hook.stats().steps == 3
    hook.close()


def test_forked_child_builds_its_own_emitter() -> None:
    built: list[int] = []
    exporter = InMemoryExporter()

    def factory() -> BackgroundEmitter:
        built.append(os.getpid())
        return BackgroundEmitter(exporter)

    hook = RankHook(RANK, factory)
    hook.open()
    pid = os.fork()
    if pid == 0:  # child: emits through a fresh emitter of its own, never the parent's
        with hook.step():
            pass
        flushed = hook.flush(10)
        ok = flushed and built[-1] == os.getpid() and hook.emitter is not None
        os._exit(0 if ok and len(exporter.values()) == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert built == [os.getpid()]
    with hook.step():
        pass
    assert len(_events(hook, exporter)) == 1  # the parent's emitter still works
    hook.close()


def test_a_relaunched_ranks_steps_and_summaries_carry_its_attempt() -> None:
    """Contract 1.4: the attempt the launcher's restart count gave the hook is on every step and
    kernel summary, and survives a domain change (set_domains)."""
    from dataclasses import replace

    from producers.hook.identity import launcher_attempt

    exporter = InMemoryExporter()
    hook = RankHook(replace(RANK, attempt=launcher_attempt({"TORCHELASTIC_RESTART_COUNT": "2"})),
                    lambda: BackgroundEmitter(exporter))
    hook.set_domains({"dp": Domain(group=0, size=4, index=1)})
    for _ in range(2):
        with hook.step():
            hook.record_collective("allreduce", 1_000_000, nbytes=4096, domain="dp", group_size=4)
    events = _events(hook, exporter)
    assert [(type(e).__name__, e.attempt) for e in events] == [  # type: ignore[attr-defined]
        ("StepEvent", 2), ("KernelSummary", 2), ("StepEvent", 2), ("KernelSummary", 2)]
    assert hook.close(10)
