"""The cause a slow step names: the collectives' own transfer time, told apart from waiting.

Scenario tests run a catalogue fault through decode -> chunks -> FleetEngine in process and
judge the incident against the simulator's ground truth (the fault's scope and magnitude); the
unit tests build frames by hand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest

from bench.detection.run import run_record, score_records
from producers.simulator.catalogue import scenario_job
from producers.simulator.fleet import FleetJob
from producers.simulator.stream import SimRun, stream_runs
from schemas import Incident, Topics, bounded, encode
from schemas.columns import PHASES
from streams.detect.config import DetectionConfig
from streams.detect.scopes import slow_step
from streams.detect.windows.step_frames import Frame
from tests.streams.helpers import T0, feed_engine, kernel_rows

pytestmark = pytest.mark.slow  # ~20-50 s: left out of make test-quick

TOPICS = Topics("")


def _replay(run: SimRun) -> list[dict[str, Any]]:
    raws: list[bytes] = []
    stream_runs([run], TOPICS, lambda t, k, v: raws.append(v))
    out = feed_engine([raws], behind=None, drain_ticks=40)
    return [orjson.loads(encode(bounded(o))) for o in out if isinstance(o, Incident)]


def _latest(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for m in messages:
        latest[m["incident_id"]] = m
    return list(latest.values())


def test_more_collective_traffic_is_named_as_the_cause() -> None:
    """uncompressed_gradients (spec §4: gradient AllReduce bytes x8 on every rank) is a job-wide slow
    step; its cause is the collectives' traffic, with the bytes ratio the fault injected, not the
    phase of the run's single worst step (a checkpoint inside the slow period)."""
    job = scenario_job("uncompressed_gradients", ranks=64, steps=120, seed=1, job_id="comm-volume")
    run = SimRun(job)
    messages = _replay(run)
    scores = score_records([run_record("uncompressed_gradients", run)], messages)["scenarios"]
    s = scores["uncompressed_gradients"]
    assert s["recall"] == s["precision"] == s["localisation"] == 1.0, s
    assert s["rule_attribution"] == 1.0, s  # expected: SLOW_STEP (cause comm_volume), not R5/R6
    injected = job.faults[0].magnitude["grad_bytes_factor"]
    found = [m for m in _latest(messages) if m["scope"] == "job"]
    assert len(found) == 1, found
    inc = found[0]
    assert "collective traffic grew" in inc["cause"], inc
    assert abs(inc["evidence"]["comm_bytes_ratio"] - injected) / injected < 0.1, inc["evidence"]
    assert "allreduce/dp transfer time" in inc["summary"], inc["summary"]


def test_waiting_for_a_straggler_is_not_a_communication_cause() -> None:
    """A slow rank makes its peers' collectives wait (their kernel time grows); the ranks that waited
    least show the transfer unchanged, so no incident of the run names communication."""
    run = SimRun(scenario_job("slow_rank", ranks=64, steps=90, seed=2, job_id="straggler"))
    messages = _replay(run)
    s = score_records([run_record("slow_rank", run)], messages)["scenarios"]["slow_rank"]
    assert s["recall"] == s["localisation"] == 1.0, s
    causes = {m["cause"] for m in messages if m.get("cause")}
    assert causes and not any("collective" in c for c in causes), causes


# --- unit: hand-built frames ------------------------------------------------------------


def _frame(step: int, comm_ns: list[int], comm_bytes: int, forward_ms: float = 600.0,
           step_ms: float | None = None) -> Frame:
    world = len(comm_ns)
    f = Frame.empty(step, world, T0)
    f.seen[:] = True
    f.start_ns[:] = T0 + step * 10**9
    total = step_ms if step_ms is not None else forward_ms + 300.0 + max(comm_ns) / 4e6
    f.end_ns[:] = f.start_ns + int(total * 1e6)
    f.phases[:] = 10.0
    f.phases[PHASES.index("forward_ms")] = forward_ms
    f.kernels = [kernel_rows([[r, step, [["allreduce/dp", "comm", 4, comm_ns[r], None, comm_bytes, "dp"]], 0]
                              for r in range(world)])]
    return f


def _history(state: slow_step.SlowStepState, cfg: slow_step.Params, steps: int = 30) -> None:
    rng = np.random.default_rng(0)
    for s in range(steps):
        comm = [int(200e6 * rng.uniform(0.98, 1.02)) + r * 20_000_000 for r in range(8)]  # waits grow by rank
        slow_step.evaluate(_frame(s, comm, 1 << 30, forward_ms=600.0 * rng.uniform(0.99, 1.01)), state, cfg)


def test_same_traffic_in_more_time_on_every_rank_is_bandwidth_or_a_stall() -> None:
    cfg = DetectionConfig().params(slow_step.Params)
    state = slow_step.SlowStepState()
    _history(state, cfg)
    comm = [int(200e6 * 3) + r * 20_000_000 for r in range(8)]  # every transfer 3x, same bytes
    _, first = slow_step.evaluate(_frame(30, comm, 1 << 30, step_ms=1400.0), state, cfg)
    _, second = slow_step.evaluate(_frame(31, comm, 1 << 30, step_ms=1400.0), state, cfg)
    assert [f.cause_phase for f in first + second] == ["comm_stall", "comm_bandwidth"], "one step, then lasting"
    assert second[0].evidence["comm_bytes_ratio"] == 1.0
    assert 2.5 < second[0].evidence["comm_time_ratio"] < 3.5
    assert first[0].candidate_gap == cfg.stall_gap_steps, "a stall may recur a few steps later"


def test_more_bytes_is_volume() -> None:
    cfg = DetectionConfig().params(slow_step.Params)
    state = slow_step.SlowStepState()
    _history(state, cfg)
    comm = [int(200e6 * 6) + r * 20_000_000 for r in range(8)]
    _, found = slow_step.evaluate(_frame(30, comm, 8 << 30, step_ms=1700.0), state, cfg)
    assert [f.cause_phase for f in found] == ["comm_volume"]
    assert found[0].evidence["comm_bytes_ratio"] == 8.0


def test_peers_waiting_on_a_slow_forward_name_the_forward() -> None:
    """Rank 0 computes 400 ms longer; every other rank's collective waits that long, rank 0's does not."""
    cfg = DetectionConfig().params(slow_step.Params)
    state = slow_step.SlowStepState()
    _history(state, cfg)
    comm = [200_000_000] + [200_000_000 + 400_000_000 + r * 20_000_000 for r in range(1, 8)]
    _, found = slow_step.evaluate(_frame(30, comm, 1 << 30, forward_ms=1000.0, step_ms=1400.0), state, cfg)
    assert [f.cause_phase for f in found] == ["forward_ms"]


def test_no_summaries_no_communication_verdict() -> None:
    cfg = DetectionConfig().params(slow_step.Params)
    state = slow_step.SlowStepState()
    _history(state, cfg)
    frame = _frame(30, [200_000_000] * 8, 1 << 30, forward_ms=1000.0, step_ms=1400.0)
    frame.kernels = []
    _, found = slow_step.evaluate(frame, state, cfg)
    assert [f.cause_phase for f in found] == ["forward_ms"]
    assert "comm_time_ratio" not in found[0].evidence


def test_stalls_a_few_steps_apart_are_one_intermittent_incident() -> None:
    """timing_conflicts (spec §4: 1-3 s stalls every 7th step, no single metric off): each stall is one
    slow step between clean ones; the stalls are one incident, opened at the second, naming a stall."""
    job = scenario_job("timing_conflicts", ranks=64, steps=120, seed=0, job_id="stalls")
    run = SimRun(job)
    messages = _replay(run)
    s = score_records([run_record("timing_conflicts", run)], messages)["scenarios"]["timing_conflicts"]
    assert s["recall"] == s["precision"] == s["localisation"] == 1.0, s
    assert s["incidents_per_fault"] == 1.0, s
    every = int(job.faults[0].magnitude["every_steps"])
    assert s["delay_steps_p50"] <= every, "open at the second stall"
    (inc,) = _latest(messages)
    assert "held up inside a collective" in inc["cause"], inc


def test_planned_step_kinds_alone_never_open_an_incident() -> None:
    """Evaluation steps and checkpoints (isolated slow steps in forward and inter-step CPU) are healthy,
    however often they come: here every 6th and every 9th step, well inside `stall_gap_steps`."""
    base = scenario_job("healthy", ranks=64, steps=120, seed=3)
    job = FleetJob("planned", base.topology, 120, [], 3, model=base.model,
                   noise=replace(base.noise, eval_every=6, checkpoint_every=9))
    assert DetectionConfig().stall_gap_steps > 9
    assert _replay(SimRun(job)) == []


def test_a_slow_batch_right_before_a_checkpoint_is_no_incident() -> None:
    """healthy_jittery, seed 0 (8 % jitter, every trait on): one rank's 280 ms data stall makes step 99
    12 % slow (within the jittery job's noise for the slow-step scope), then step 100 is the checkpoint
    (and an evaluation). R3 flagged both steps' throughput, so the checkpoint's lone slow step opened a
    job incident; R3 on step time now counts only on steps the slow-step scope finds slow."""
    job = scenario_job("healthy_jittery", ranks=64, steps=120, seed=0, job_id="coincidence")
    frames = list(job.iter_frames())
    assert frames[99].duration_ms > 1.1 * np.median([f.duration_ms for f in frames[60:95]])  # the case holds
    assert _latest(_replay(SimRun(job))) == []
