"""A simulated job of 1,024 ranks landed in a backend, with the incidents the detection engine finds in it.

For the report's Chromium test and screenshot: the fleet simulator with catalogue faults (a
straggler, a GC storm, a data stall), every StepEvent through the real row mapping and writer, and
the incidents from replaying the same events through the detect worker's engine.
"""

from __future__ import annotations

import time
from dataclasses import replace

from producers.simulator.catalogue import data_stalls, gc_pauses, straggler
from producers.simulator.fleet import FleetJob, Noise
from producers.simulator.topology import Topology
from producers.simulator.traits import Traits
from schemas import Incident
from sinks import rows
from sinks.backend import Backend
from sinks.migrations.runner import migrate
from sinks.writer import BatchingWriter
from tests.streams.helpers import incidents, run_engine

JOB = "sim-1024"
SLOW_RANK = 613
TOPOLOGY = Topology(dp=32, tp=8, pp=4)  # 1,024 ranks on 128 hosts


def build(steps: int = 120, seed: int = 11) -> FleetJob:
    """Started an hour ago (inside every table's TTL), a few minutes long. Pauses and stalls are sized
    as shares of the healthy step; quiet healthy noise (no warm-up, checkpoint, eval, hiccup or GC
    steps: the report's pictures show the injected faults alone) and no heavy-tailed stalls (one would
    outshine the straggler in the heatmap's hottest cell)."""
    start_ns = (int(time.time()) - 3600) * 1_000_000_000
    step = FleetJob(JOB, TOPOLOGY, 1).nominal_ms
    faults = [straggler(TOPOLOGY, SLOW_RANK, 1.3, 0, steps - 1), *gc_pauses(TOPOLOGY, (30, 31, 32), 0.88 * step),
              *data_stalls(TOPOLOGY, (80, 81, 82, 83), 1.1 * step)]
    return FleetJob(JOB, TOPOLOGY, steps, faults, seed, start_ns=start_ns, noise=Noise.quiet(),
                    traits=Traits().without(["heavy_tail"]))


def load(backend: Backend, steps: int = 120) -> list[Incident]:
    """Land the job's steps and the engine's incidents (each one's latest state) in `backend`."""
    job = build(steps)
    migrate(backend)
    ends = {frame.step: frame.end_ns for frame in job.iter_frames()}
    # the engine runs on its own test clock: stamp each incident when its last step ended, as live
    found = {i.incident_id: replace(i, detected_ns=ends.get(i.step_last or 0, job.start_ns))
             for i in incidents(run_engine(job))}
    writer = BatchingWriter(backend, max_rows=50_000, max_seconds=60.0, max_buffered_rows=200_000)
    now = time.time_ns()
    for event in [*job.job_events(), *found.values()]:
        for row in rows.rows_for(event, now):
            writer.add_row(row)
    for step_events in job.iter_steps():
        for event in step_events:
            for row in rows.rows_for(event, now):
                writer.add_row(row)
    writer.flush()
    return list(found.values())
