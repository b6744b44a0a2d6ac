"""Small builders for stream-processor tests (no simulator needed)."""

from __future__ import annotations

from schemas import Domain, Phases, StepEvent

T0 = 1_700_000_000_000_000_000


def step_event(rank: int, step: int, busy: float, comm: float = 40.0, world: int = 8, dp_size: int = 8,
               gc: float = 5.0, job: str = "job-a") -> StepEvent:
    """A rank's step whose busy time is `busy` ms and exposed comm `comm` ms."""
    forward = busy - gc - 20.0 - 30.0
    duration_ns = int((busy + comm) * 1e6)
    return StepEvent(
        job=job, rank=rank, world=world, host=f"node-{rank // 8}", device=rank % 8,
        domains={"dp": Domain(group=rank // dp_size, size=dp_size, index=rank % dp_size)},
        step=step, start_ns=T0 + step * 10**9, end_ns=T0 + step * 10**9 + duration_ns,
        phases=Phases(data_ms=20.0, forward_ms=forward, optimizer_ms=30.0, gc_ms=gc, comm_exposed_ms=comm),
    )


def run_engine(job: object, cfg: object = None, batch: int = 4096, with_end: bool = True) -> list[object]:
    """Feed a SimulatedJob through decode -> chunks -> FleetEngine, as the worker does, in batches."""
    from producers.simulator.cluster import SimulatedJob
    from schemas import encode
    from steplens.config import DetectionConfig
    from streams.combine import chunks as codec
    from streams.engine import FleetEngine
    from streams.ingest.decode import decode_batch

    assert isinstance(job, SimulatedJob)
    config = cfg if isinstance(cfg, DetectionConfig) else DetectionConfig()
    fleet = FleetEngine(config)
    start, end = job.job_events()
    raws = [encode(start)] + [encode(e) for events in job.iter_steps() for e in events]
    if with_end:
        raws.append(encode(end))
    out: list[object] = []
    now = T0
    for i in range(0, len(raws), batch):
        chunks, _ = decode_batch(raws[i:i + batch], 1 << 20)
        for chunk in chunks:
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        now += 10**8
        out.extend(fleet.tick(now))
    out.extend(fleet.tick(now + 120 * 10**9))
    return out
