"""Job attempts in the fleet simulator (producers.simulator.attempts): a crash stops a launch, a
relaunch under the same id re-runs steps from its checkpoint with its attempt on every event, an
elastic relaunch runs with fewer hosts that keep their names."""

from __future__ import annotations

import orjson
import pytest

from producers.simulator.attempts import plan_attempts, without_host
from producers.simulator.catalogue import SCENARIOS, build_faults, layout
from producers.simulator.stream import SimRun, SimulatedClock, stream_runs
from producers.simulator.topology import Topology
from schemas import Topics, decode

STEPS = 80


def _stream(name: str, seed: int = 0) -> tuple[SimRun, list[tuple[str, dict[str, object]]], SimulatedClock]:
    topo = layout(64)
    faults = build_faults(SCENARIOS[name], topo, STEPS, seed)
    run = SimRun.of_attempts(plan_attempts(name, topo, STEPS, faults, seed))
    sent: list[tuple[str, dict[str, object]]] = []
    clock = SimulatedClock()
    topics = Topics("")

    def send(topic: str, key: bytes, value: bytes) -> None:
        data = orjson.loads(value)
        for doc in data if isinstance(data, list) else [data]:
            decode(orjson.dumps(doc))  # every event stays in contract
            sent.append((topic, doc))

    stream_runs([run], topics, send, clock=clock.now, idle=clock.advance)
    return run, sent, clock


def _jobs(sent: list[tuple[str, dict[str, object]]]) -> list[tuple[object, object, object]]:
    return [(d["phase"], d.get("attempt", 0), d["world"]) for t, d in sent if d.get("type") == "job"]


def test_a_crash_sends_nothing_from_its_step_on_and_no_end() -> None:
    run, sent, clock = _stream("job_crash")
    crash = run.faults[0].start
    assert _jobs(sent) == [("start", 0, 64)]
    steps = [d["step"] for t, d in sent if d.get("type") == "step"]
    assert max(steps) == crash - 1
    last_end = max(int(str(d["end_ns"])) for t, d in sent if d.get("type") == "step")
    # nothing after the crash: a host's last sample at most one sampling interval (its phase) past the last step
    assert all(int(str(d["ts_ns"])) <= last_end + 1_050_000_000 for t, d in sent if d.get("type") == "device")
    assert clock.ns == 0  # no relaunch to wait for


def test_a_relaunch_re_runs_steps_from_its_checkpoint_after_its_gap() -> None:
    run, sent, clock = _stream("relaunch_slow_rank")
    crash, slow = run.faults
    assert slow.attempt == 1 and crash.magnitude["restart_after_s"] == 90.0
    assert _jobs(sent) == [("start", 0, 64), ("start", 1, 64), ("end", 1, 64)]
    first = [d["step"] for t, d in sent if d.get("type") == "step" and d.get("attempt", 0) == 0]
    second = [d["step"] for t, d in sent if d.get("type") == "step" and d.get("attempt") == 1]
    restart = int(crash.magnitude["restart_from_step"])
    assert max(first) == crash.start - 1 and min(second) == restart < crash.start and max(second) == STEPS - 1
    assert all(d.get("attempt") == 1 for t, d in sent if d.get("type") == "kernel_summary" and d["step"] >= crash.start)
    assert clock.ns >= 90 * 10**9  # the stream waited the gap (on the simulated clock)
    starts = [int(str(d["ts_ns"])) for t, d in sent if d.get("type") == "job" and d["phase"] == "start"]
    last_first = max(int(str(d["end_ns"])) for t, d in sent if d.get("type") == "step" and d.get("attempt", 0) == 0)
    assert abs(starts[1] - last_first - 90 * 10**9) < 50_000_000  # the job clock shows the gap (hosts disagree by ms)
    assert run.onset_ns.keys() == {0, 1}


def test_an_elastic_relaunch_drops_the_evicted_host_and_keeps_the_others_names() -> None:
    run, sent, _ = _stream("elastic_relaunch", seed=1)
    dead, _ = run.faults
    evicted = dead.hosts[0]
    assert _jobs(sent) == [("start", 0, 64), ("start", 1, 56), ("end", 1, 56)]
    hosts_after = {d["host"] for t, d in sent if d.get("type") == "step" and d.get("attempt") == 1}
    assert hosts_after == {f"node-{h}" for h in range(8)} - {evicted}
    ranks_after = {d["rank"] for t, d in sent if d.get("type") == "step" and d.get("attempt") == 1}
    assert ranks_after == set(range(56))


def test_without_host_keeps_model_parallel_groups_whole() -> None:
    assert without_host(Topology(dp=8, tp=4, pp=2), 3).world == 56
    with pytest.raises(ValueError, match="whole"):
        without_host(Topology(dp=2, tp=8, pp=2, devices_per_host=4), 0)  # 28 ranks: no whole TP8×PP2 replica
    with pytest.raises(ValueError, match="no crash leads"):
        plan_attempts("x", layout(64), STEPS, [f for f in build_faults(SCENARIOS["relaunch_slow_rank"], layout(64),
                                                                       STEPS, 0) if f.attempt == 1], 0)
