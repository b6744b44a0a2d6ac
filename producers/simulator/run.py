"""Drive a simulated job through an emitter, as a training job would emit its telemetry."""

from __future__ import annotations

from producers.emitter import BackgroundEmitter, EmitterStats
from producers.simulator.fleet import FleetJob


def run_simulation(
    job: FleetJob,
    emitter: BackgroundEmitter,
    *,
    flush_timeout: float = 60.0,
    pace: bool = True,
    pace_timeout: float = 30.0,
) -> EmitterStats:
    """Emit JobEvent start, every rank's StepEvents step by step, JobEvent end, then flush.

    The simulator produces events far faster than a cluster, so with `pace` it waits for room
    in the emitter's queue before each step instead of overflowing it (a real training loop
    never waits; this is a load generator). A launch that crashes (a `job_crash` fault) emits
    no `end`, as its processes are gone. Returns the emitter's stats after the flush.
    """
    start, end = job.job_events()
    emitter.emit(start)
    capacity = emitter.max_queue
    for events in job.iter_steps():
        if pace:
            room = capacity - min(len(events), capacity)

            def has_room(stats: EmitterStats, room: int = room) -> bool:
                return stats.queued <= room

            emitter.wait_until(has_room, pace_timeout)
        for event in events:
            emitter.emit(event)
    if job.crash_step is None:
        emitter.emit(end)
    emitter.flush(flush_timeout)
    return emitter.stats()
