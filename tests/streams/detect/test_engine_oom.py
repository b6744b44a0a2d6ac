"""The OOM forecast through the engine: a simulated leak opens one incident naming its rank before the crash;
a job keeping its memory at 95-97 % opens none (step and device events decoded as the worker does, no Kafka)."""

from __future__ import annotations

from producers.simulator.catalogue import scenario_job
from producers.simulator.events import FrameEncoder
from producers.simulator.fleet import FleetJob
from producers.simulator.traits import Traits
from schemas import Incident, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import T0


def _run(job: FleetJob) -> list[tuple[int, Incident]]:
    """Each step's step events and device samples in one decode batch, the clock one step on per batch;
    the incident events with the newest step sent when each came out."""
    fleet = FleetEngine(DetectionConfig())
    encoder = FrameEncoder(job, ("step", "device"))
    start, _ = job.job_events()
    out: list[tuple[int, Incident]] = []
    now, sent = T0, -1

    def feed(raws: list[bytes]) -> None:
        nonlocal now
        chunks, _ = decode_batch(raws, 1 << 20)
        found = [o for chunk in chunks for o in fleet.on_chunk(codec.loads(codec.dumps(chunk)), now)]
        now += 1_000_000_000
        found += fleet.tick(now)
        out.extend((sent, o) for o in found if isinstance(o, Incident))

    feed([encode(start)])
    for frame in job.iter_frames():
        sent = frame.step
        feed([e.value for e in encoder.encode(frame)])
    return out


def test_leak_opens_one_incident_naming_its_rank_before_the_crash() -> None:
    job = scenario_job("memory_leak_fast", ranks=16, steps=200, seed=1)
    leak = job.faults[0]
    crash = job.crash_step
    assert crash is not None and crash == int(leak.magnitude["oom_step"]), "the leak ends the job out of memory"
    out = _run(job)
    opened = [(sent, i) for sent, i in out if i.state == "open"]
    assert len(opened) == 1, [i.summary for _, i in opened]
    _, incident = opened[0]
    assert incident.ranks == list(leak.ranks)
    # the forecast is that incident's (R2's drift on the same device may open it a little earlier)
    oom = [(sent, i) for sent, i in out if "OOM" in {i.rule, *i.rules}]
    assert oom and {i.incident_id for _, i in oom} == {incident.incident_id}
    assert oom[0][0] <= crash - 50, f"forecast at step {oom[0][0]}, out of memory at {crash}: under 50 steps ahead"
    # the step it runs out at is the incident's evidence (its text is the opening finding's: the forecast's or
    # R2's, whichever came first), before the crash
    steps = [s for _, i in oom if (s := i.evidence.get("oom_step")) is not None]
    assert steps and all(oom[0][0] < s for s in steps), steps
    assert abs(steps[-1] - crash) <= 10, (steps[-1], crash)


def test_memory_steady_at_95_to_97_percent_opens_nothing() -> None:
    job = scenario_job("healthy_full_memory", ranks=16, steps=200, seed=2)
    assert job.mem_levels.min() >= 95.0 and job.crash_step is None
    assert [i.summary for _, i in _run(job)] == []


def _opened(out: list[tuple[int, Incident]]) -> list[tuple[int, Incident]]:
    return [(sent, i) for sent, i in out if i.state == "open"]


def test_the_steps_allocator_statistics_judge_a_leak_and_without_them_the_device_samples_do() -> None:
    """Contract 1.5's per-step peak is the forecast's input where a rank sends it (one incident, its text the
    allocator's); a 1.4 producer's job (trait off) is forecast from the devices' `mem_pct` as before."""
    for traits, metric in ((Traits(), "mem_peak_bytes"), (Traits(allocator_stats=False), "T6")):
        job = scenario_job("memory_leak", ranks=16, steps=200, seed=3, traits=traits)
        crash = job.crash_step
        assert crash is not None
        out = _run(job)
        assert len(_opened(out)) == 1, [i.summary for _, i in _opened(out)]
        oom = [(sent, i) for sent, i in out if "OOM" in {i.rule, *i.rules}]
        assert oom and oom[0][0] <= crash - 50 and oom[0][1].ranks == list(job.faults[0].ranks)
        # the forecast's evidence says which input it read: bytes of capacity (the steps) or seconds (the samples)
        steps_path = any("capacity_bytes" in i.evidence for _, i in oom)
        assert steps_path == (metric == "mem_peak_bytes") and steps_path != any("seconds_left" in i.evidence
                                                                                for _, i in oom)


def test_fragmentation_is_one_incident_named_as_such_before_reserved_fills() -> None:
    job = scenario_job("allocator_fragmentation", ranks=16, steps=200, seed=4)
    crash = job.crash_step
    assert crash is not None and crash == int(job.faults[0].magnitude["oom_step"])
    out = _run(job)
    opened = _opened(out)
    assert len(opened) == 1, [i.summary for _, i in opened]
    oom = [(sent, i) for sent, i in out if "OOM" in {i.rule, *i.rules}]
    assert oom and oom[0][0] <= crash - 50 and oom[0][1].ranks == list(job.faults[0].ranks)
    frag = [i for _, i in oom if "fragmentation" in i.summary]
    assert frag and "expandable_segments" in (frag[0].suggestion or ""), [i.summary for _, i in oom]
