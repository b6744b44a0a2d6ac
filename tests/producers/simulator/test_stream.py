"""Streaming simulated jobs: interleaving, job lifecycle, onsets, a hung job; and the fleet CLI
through the real broker, every message decoded by the contract."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.simulator.__main__ import main as simulator_main
from producers.simulator.catalogue import SCENARIOS, build_faults, layout
from producers.simulator.fleet import FleetJob
from producers.simulator.ground_truth import read_ground_truth
from producers.simulator.stream import SimRun, stream_runs
from schemas import DeviceSample, Event, JobEvent, KernelSummary, StepEvent, Topics, decode, split_record
from schemas.codec import decode_mapping
from streams.topics_admin import ensure_topics

TOPICS = Topics("t.")


def events(value: bytes | None) -> list[Event]:
    """Every event of one record (an object, or a packed array: contract 1.2), each decoded by the contract."""
    elements, _ = split_record(value)
    return [decode_mapping(e) for e in elements]


def flat(sent: list[tuple[str, bytes, bytes]]) -> list[tuple[str, bytes, Event]]:
    return [(t, k, e) for t, k, v in sent for e in events(v)]


def job(name: str, scenario: str, steps: int = 30, seed: int = 1) -> FleetJob:
    topo = layout(64)
    return FleetJob(name, topo, steps, build_faults(SCENARIOS[scenario], topo, steps, seed), seed)


def test_runs_are_interleaved_with_job_lifecycle_and_onsets() -> None:
    sent: list[tuple[str, bytes, bytes]] = []
    runs = [SimRun(job("a", "slow_host")), SimRun(job("b", "healthy"), include=("step",))]
    stream_runs(runs, TOPICS, lambda t, k, v: sent.append((t, k, v)))
    jobs = [decode(v) for t, _, v in sent if t == TOPICS.jobs]
    assert [(e.job, e.phase) for e in jobs if isinstance(e, JobEvent)] == [
        ("a", "start"), ("b", "start"), ("a", "end"), ("b", "end")]
    steps = [(k.split(b"/")[0], e) for t, k, e in flat(sent) if t == TOPICS.steps]
    assert len(steps) == 2 * 64 * 30
    order = [k for k, _ in steps]
    assert order[:64] == [b"a"] * 64 and order[64:128] == [b"b"] * 64  # step 0 of a, step 0 of b, ...
    assert not any(k.startswith(b"b/") for t, k, _ in sent if t == TOPICS.kernel_summaries)
    assert set(runs[0].onset_ns) == {0} and runs[0].onset_ns[0] > runs[0].job.start_ns
    assert runs[0].rank_steps == runs[1].rank_steps == 64 * 30


def test_a_hung_rank_stops_every_step_but_not_the_device_samples() -> None:
    sent: list[tuple[str, bytes, bytes]] = []
    run = SimRun(job("h", "hung_rank"))
    stream_runs([run], TOPICS, lambda t, k, v: sent.append((t, k, v)))
    onset = run.faults[0].start
    steps = [e for t, _, e in flat(sent) if t == TOPICS.steps]
    assert max(e.step for e in steps if isinstance(e, StepEvent)) == onset - 1
    hung = run.faults[0].ranks[0]
    late = [e for t, _, e in flat(sent) if t == TOPICS.device and isinstance(e, DeviceSample)
            and e.ts_ns > run.onset_ns[0] + 2_000_000_000]
    assert late and {e.rank for e in late} == set(range(64))
    assert all((e.aicore_pct == 0.0) == (e.rank == hung) for e in late)
    end = [e for t, _, v in sent if t == TOPICS.jobs and isinstance(e := decode(v), JobEvent) and e.phase == "end"]
    assert end[0].last_step == onset - 1


@pytest.mark.kafka
@pytest.mark.integration
def test_fleet_cli_through_kafka(kafka_settings: Settings, unique_name: str, tmp_path: Path) -> None:
    settings = kafka_settings
    kafka_bootstrap = settings.kafka_bootstrap
    topics = Topics(f"{unique_name}.")
    ensure_topics(settings, topics, 2)
    gt = tmp_path / "gt.jsonl"
    rc = simulator_main(["--scenario", "cooling_loss", "--ranks", "64", "--steps", "24", "--seed", "2",
                         "--job", unique_name, "--bootstrap", kafka_bootstrap, "--topic-prefix", f"{unique_name}.",
                         "--ground-truth", str(gt)])
    assert rc == 0
    truth = read_ground_truth(gt)
    assert len(truth) == 1 and truth[0]["kind"] == "cooling_loss" and truth[0]["job"] == unique_name
    consumer = KafkaConsumer(**kafka_client_config(settings, "admin"), enable_auto_commit=False)
    names = (topics.steps, topics.kernel_summaries, topics.device, topics.jobs)
    parts = [TopicPartition(n, p) for n in names for p in sorted(consumer.partitions_for_topic(n) or ())]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    counts: dict[type, int] = {}
    deadline = time.monotonic() + 120
    while counts.get(StepEvent, 0) < 64 * 24 or counts.get(KernelSummary, 0) < 64 * 24:
        assert time.monotonic() < deadline, counts
        for msgs in consumer.poll(timeout_ms=500).values():
            for m in msgs:
                for event in events(m.value):
                    counts[type(event)] = counts.get(type(event), 0) + 1
    consumer.close()
    assert counts[StepEvent] == counts[KernelSummary] == 64 * 24
    assert counts[DeviceSample] >= 64 * 24 and counts[JobEvent] == 2


def test_packed_records_group_a_hosts_events_and_hold_the_same_events_as_unpacked() -> None:
    packed: list[tuple[str, bytes, bytes]] = []
    plain: list[tuple[str, bytes, bytes]] = []
    runs = [SimRun(job("p", "slow_host", steps=6)), SimRun(job("p", "slow_host", steps=6), packed=False)]
    stream_runs([runs[0]], TOPICS, lambda t, k, v: packed.append((t, k, v)))
    stream_runs([runs[1]], TOPICS, lambda t, k, v: plain.append((t, k, v)))
    assert runs[0].events == runs[1].events == runs[1].records > runs[0].records
    assert all(v.startswith(b"{") for _, _, v in plain)
    raw = [(t, v) for t, _, v in packed if t != TOPICS.jobs]
    assert raw and all(v.startswith(b"[") for _, v in raw)
    topo = runs[0].job.topology
    for _, k, e in flat(packed):  # a record's key names the host (device samples: the host) of every element
        if isinstance(e, StepEvent | KernelSummary):
            assert k == f"p/{e.host}".encode() and e.host == f"node-{int(topo.host_ids[e.rank])}"
        elif isinstance(e, DeviceSample):
            assert k == e.host.encode()
    # the same events in the same per-rank order, only grouped into records
    assert sorted(map(repr, (e for _, _, e in flat(packed)))) == sorted(map(repr, (e for _, _, e in flat(plain))))
    per_rank = [(e.rank, e.step) for _, _, e in flat(packed) if isinstance(e, StepEvent)]
    for rank in range(8):
        mine = [s for r, s in per_rank if r == rank]
        assert mine == sorted(mine) and len(mine) == 6


def test_scenario_job_matches_the_catalogue() -> None:
    from producers.simulator.catalogue import scenario_job
    j = scenario_job("moe_imbalance", ranks=64, steps=40, seed=2)
    assert j.topology.ep == 4 and j.model.experts == 8 and j.faults[0].domain == "ep"
    assert j.faults == tuple(build_faults(SCENARIOS["moe_imbalance"], j.topology, 40, 2))
