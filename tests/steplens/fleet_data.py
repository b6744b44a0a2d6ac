"""A small fleet with known faults, landed through the real row mapping and writer.

Ground truth (what the queries must find):
- job-a and job-b: 16 ranks on 4 hosts (h0..h3, 4 devices each), 40 steps; rank 5 (on h1)
  is a straggler in both (busy +30 %); steps 20–22 of job-a are slow for every rank (×1.6);
- incidents: SLOW_RANK on h1 in both jobs (a recurrent offender), one on h2 in job-a only;
- device samples: h3 runs hot (92 °C) and down-clocked (1400 of 1800 MHz), the others 60 °C;
- job-a, rank 0, steps 10–11 were profiled (3 kernels each), with a control command.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from schemas import (
    ControlCommand,
    DeviceSample,
    Domain,
    Incident,
    JobEvent,
    KernelAggregate,
    KernelBatch,
    KernelRecord,
    KernelSummary,
    MitigationAction,
    Phases,
    ProfileReady,
    StepEvent,
)
from sinks import rows
from sinks.backend import Backend
from sinks.migrations.runner import migrate
from sinks.writer import BatchingWriter

# yesterday 00:00 UTC: recent enough for every table's TTL (raw kernels keep 30 days)
T0 = (int(time.time()) // 86_400 - 1) * 86_400 * 1_000_000_000
WORLD, STEPS, PER_HOST = 16, 40, 4
SLOW_RANK, SLOW_HOST = 5, "h1"
SLOW_STEPS = (20, 21, 22)
HOT_HOST = "h3"
BASE_MS = 500.0


@dataclass(frozen=True, slots=True)
class Truth:
    jobs: tuple[str, str] = ("job-a", "job-b")
    slow_rank: int = SLOW_RANK
    slow_host: str = SLOW_HOST
    slow_steps: tuple[int, ...] = SLOW_STEPS
    hot_host: str = HOT_HOST


def host_of(rank: int) -> str:
    return f"h{rank // PER_HOST}"


def step_events(job: str, offset_ns: int) -> list[StepEvent]:
    out = []
    t = T0 + offset_ns
    for step in range(STEPS):
        factor = 1.6 if job == "job-a" and step in SLOW_STEPS else 1.0
        for rank in range(WORLD):
            busy = BASE_MS * factor * (1.3 if rank == SLOW_RANK else 1.0) + rank * 0.1
            slowest = BASE_MS * factor * 1.3
            comm = slowest - busy + 5.0  # everyone waits for the straggler
            duration = busy + comm
            phases = Phases(data_ms=5.0, forward_ms=busy * 0.3, backward_ms=busy * 0.6, optimizer_ms=busy * 0.1 - 5.0,
                            comm_exposed_ms=comm, gc_ms=0.0)
            out.append(StepEvent(
                job=job, rank=rank, world=WORLD, host=host_of(rank), device=rank % PER_HOST,
                domains={"dp": Domain(group=rank % 4, size=4, index=rank // 4),
                         "tp": Domain(group=rank // 4, size=4, index=rank % 4)},
                step=step, start_ns=t, end_ns=t + int(duration * 1e6), phases=phases,
                samples=8, tokens=8 * 4096, flops=0.4 * 989e12 * BASE_MS * 1.3 / 1e3, peak_flops=989e12,
                profiling=rank == 0 and step in (10, 11),
            ))
        t += 10 * 10**9  # a step every 10 s: the job spans minutes (the report's time series)
    return out


def incidents() -> list[Incident]:
    def one(iid: str, job: str, rank: int, offset_ns: int) -> Incident:
        return Incident(incident_id=iid, job=job, rule="SLOW_RANK", state="open", severity="warning", scope="rank",
                        summary=f"rank {rank} is slow", detected_ns=T0 + offset_ns, ranks=[rank], host=host_of(rank),
                        step_first=3, step_last=9, observed=650.0, expected=500.0, unit="ms",
                        cause="slow compute on the device", suggestion="check the device for down-clocking")
    return [
        one("a-1", "job-a", SLOW_RANK, 10**10), one("a-2", "job-a", 9, 2 * 10**10),
        one("b-1", "job-b", SLOW_RANK, 3600 * 10**9 + 10**10),
        Incident(incident_id="a-3", job="job-a", rule="SLOW_STEP", state="resolved", severity="warning", scope="job",
                 summary="steps 20-22 slow", detected_ns=T0 + 3 * 10**10, step_first=20, step_last=22),
    ]


def device_samples() -> list[DeviceSample]:
    out = []
    for tick in range(30):
        for h in range(WORLD // PER_HOST):
            host = f"h{h}"
            for device in range(PER_HOST):
                hot = host == HOT_HOST
                out.append(DeviceSample(host=host, device=device, ts_ns=T0 + tick * 10**9, power_w=300.0 + tick % 3,
                                        temp_c=92.0 if hot else 60.0, freq_mhz=1400.0 if hot else 1800.0,
                                        aicore_pct=80.0))
    return out


def profiled() -> tuple[list[KernelBatch], ControlCommand]:
    batches = []
    for step in (10, 11):
        start = T0 + step * 10**10
        kernels = [KernelRecord(name=f"k{i}", cat="compute", start_ns=start + i * 1_000_000, dur_ns=800_000)
                   for i in range(3)]
        batches.append(KernelBatch(job="job-a", rank=0, world=WORLD, host="h0", device=0, step=step, kernels=kernels))
    control = ControlCommand(command_id="c-1", job="job-a", action="profile_on", ranks=[0], step_first=10,
                             step_count=2, issued_ns=T0 + 9 * 10**10)
    return batches, control


def summaries() -> list[KernelSummary]:
    """Always-on kernel summaries of job-a's first 3 steps: a matmul and an allreduce aggregate each."""
    return [
        KernelSummary(job="job-a", rank=rank, world=WORLD, host=host_of(rank), device=rank % PER_HOST, step=step,
                      entries=[KernelAggregate(key="F2:4096x4096x4096", cat="compute", count=12, total_ns=90_000_000,
                                               metric="F2", shape={"M": 4096, "N": 4096, "K": 4096}, flops=1.6e12),
                               KernelAggregate(key="allreduce/dp", cat="comm", count=2, total_ns=30_000_000,
                                               op="allreduce", domain="dp", group_size=4, bytes=2**28)],
                      other_count=40, other_ns=5_000_000)
        for step in range(3) for rank in range(WORLD)
    ]


def all_events() -> list[rows.AnyStoredEvent]:
    batches, control = profiled()
    profile = ProfileReady(job="job-a", rank=0, host="h0", format="kineto", uri="/dumps/job-a/rank0.json",
                           step_first=10, step_last=11, ts_ns=T0 + 12 * 10**10, command_id="c-1")
    jobs = [JobEvent(job=j, phase="start", world=WORLD, ts_ns=T0, parallel={"dp": 4, "tp": 4}) for j in Truth().jobs]
    action = MitigationAction(action_id="SLOW_HOST:job-a:h1/drain", incident_id="SLOW_HOST:job-a:h1", job="job-a",
                              level="drain", verdict="dry_run", why="partition gpu is not enabled for actions",
                              reason="expected to last 3600 s more", partition="gpu", by="steplens policy",
                              at_ns=T0 + 13 * 10**10, host="h1", rule="SLOW_HOST", slowdown=0.2)
    return [*jobs, *step_events("job-a", 0), *step_events("job-b", 3600 * 10**9), *incidents(), *device_samples(),
            *batches, control, profile, *summaries(), action]


def load(backend: Backend) -> Truth:
    migrate(backend)
    writer = BatchingWriter(backend, max_rows=5000, max_seconds=60.0, max_buffered_rows=100_000)
    for event in all_events():
        for table_row in rows.rows_for(event, T0):
            writer.add_row(table_row)
    writer.flush()
    return Truth()
