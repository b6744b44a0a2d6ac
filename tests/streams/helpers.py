"""Small builders for stream-processor tests (no simulator needed)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from kafka import KafkaConsumer

from infra.clients import kafka_client_config
from infra.settings import Settings
from schemas import Domain, Incident, Phases, StepEvent
from streams.detect.combine.chunks import KernelChunk
from streams.detect.ingest.decode import add_summary, new_kernel_chunk
from streams.detect.windows.step_frames import KernelRows, NameTable, ReportedLayout

T0 = 1_700_000_000_000_000_000
# a kernel aggregate as a list: its fields in this order (trailing ones may be left out)
ROW_FIELDS = ("key", "cat", "count", "total_ns", "flops", "bytes", "domain", "launch_mean_us", "launch_mad_us",
              "direction", "max_ns")


def nan_spelled(value: Any) -> Any:
    """`value` with NaN spelled out: chunks compare by value (a NaN is unequal to itself unless it is the same
    object, which the per-event decode's constant is and the columnar read's are not), and orjson's bytes tell
    NaN from None (it writes both as null)."""
    if isinstance(value, np.ndarray):  # a numeric column of the columnar decode: its values as the lists'
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return "<NaN>"
    if isinstance(value, dict):
        return {k: nan_spelled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_spelled(v) for v in value]
    return value




def kernel_chunk(summaries: list[list[Any]], world: int = 0, job: str = "j") -> KernelChunk:
    """The decode stage's kernel chunk of `summaries`, each [rank, step, aggregates, other_ns] with each
    aggregate a list in the order of `ROW_FIELDS` (trailing fields may be left out, None: not
    stated). Ranks are not checked against `world` (tests send ranks
    outside it on purpose)."""
    chunk = new_kernel_chunk(job, 0, world)
    for rank, step, aggregates, other_ns in summaries:
        add_summary(chunk, rank, step, other_ns,
                    [{k: v for k, v in zip(ROW_FIELDS, a, strict=False) if v is not None} for a in aggregates])
    return chunk  # type: ignore[return-value]


def kernel_rows(summaries: list[list[Any]], names: NameTable | None = None) -> KernelRows:
    """`summaries` (as `kernel_chunk` takes them) as KernelRows, their names in `names` (blocks of one frame
    share one table) or a table of their own."""
    return (names or NameTable()).rows(kernel_chunk(summaries))


def hosts_topology(world: int = 16, per_host: int = 8) -> ReportedLayout:
    """A job's topology with only ranks and hosts filled in (rank r on node-{r // per_host})."""
    topo = ReportedLayout()
    topo.grow(world)
    topo.hosts = [f"node-{h}" for h in range(world // per_host)]
    topo.host_index = {h: i for i, h in enumerate(topo.hosts)}
    topo.host_of = np.arange(world, dtype=np.int64) // per_host
    return topo


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


def step_ms(topo: object) -> float:
    """The healthy step time (ms) of a FleetJob on `topo`: engine tests size hand-placed pauses and
    stalls as shares of it, so a fault is as big next to the step on any layout."""
    from producers.simulator.fleet import FleetJob
    from producers.simulator.topology import Topology as SimTopology

    assert isinstance(topo, SimTopology)
    return FleetJob("nominal", topo, 1).nominal_ms


def run_engine(job: object, cfg: object = None, *, paced_s: float = 0.0, drop: object = None,
               with_end: bool = True, batch: int = 4096, behind_s: float = 0.0,
               hold: object = None) -> list[object]:
    """Feed a FleetJob's step events through decode -> chunks -> FleetEngine, as the worker does.

    paced_s = 0: fast replay in batches of `batch` messages; > 0: one step per batch,
    the clock advancing `paced_s` per step (timeouts and hangs behave as in production).
    drop(event) -> True leaves an event out (a hung or silent rank).
    behind_s: how far behind its input the decode stage says it is (a backlog).
    hold(event) -> n (paced only): the event arrives n steps late, with the step n later (a partition
    whose reader died, read again once the group gave it to another worker).
    """
    from producers.simulator.fleet import FleetJob
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch

    assert isinstance(job, FleetJob)
    config = cfg if isinstance(cfg, DetectionConfig) else DetectionConfig()
    fleet = FleetEngine(config)
    start, end = job.job_events()

    def keep(e: StepEvent) -> bool:
        return drop is None or not drop(e)  # type: ignore[operator]

    batches: list[list[bytes]] = [[encode(start)]]
    if paced_s > 0:
        paced: list[list[bytes]] = []
        held: dict[int, list[bytes]] = {}
        for i, events in enumerate(job.iter_steps()):
            now_batch = held.pop(i, [])
            for e in events:
                late = int(hold(e)) if hold is not None else 0  # type: ignore[operator]
                if keep(e):
                    (held.setdefault(i + late, []) if late else now_batch).append(encode(e))
            paced.append(now_batch)
        paced += [held[k] for k in sorted(held)]
        batches += paced
    else:
        flat = [encode(e) for events in job.iter_steps() for e in events if keep(e)]
        batches += [flat[i:i + batch] for i in range(0, len(flat), batch)]
    if with_end:
        batches.append([encode(end)])
    out: list[object] = []
    now = T0
    step_ns = int((paced_s or 0.1) * 1e9)
    for raws in batches:
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = int(behind_s * 1e9), 0
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        for _ in range(4):
            now += step_ns // 4
            out.extend(fleet.tick(now))
    for _ in range(240):
        now += 500_000_000
        out.extend(fleet.tick(now))
    return out


def incidents(outputs: list[object], state: str | None = None) -> list[Incident]:
    """The incident events among engine outputs (optionally only one state)."""
    return [o for o in outputs if isinstance(o, Incident) and (state is None or o.state == state)]


def wait_topics_visible(s: Settings, names: tuple[str, ...], timeout: float = 60.0) -> None:
    """A worker that starts before fresh topics reach the broker's metadata gets no partitions at all."""
    consumer = KafkaConsumer(**kafka_client_config(s, "admin"), group_id=None)
    try:
        deadline = time.monotonic() + timeout
        while not set(names) <= consumer.topics() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert set(names) <= consumer.topics(), f"topics not visible: {set(names) - consumer.topics()}"
        for name in names:  # and every partition has a leader
            while not consumer.partitions_for_topic(name) and time.monotonic() < deadline:
                consumer.poll(timeout_ms=200)
    finally:
        consumer.close()


def run_launches(launches: list[tuple[object, bool]], cfg: object = None, *, paced_s: float = 0.5,
                 gap_s: float = 90.0, backlog: bool = False) -> list[object]:
    """Feed the launches of one job (FleetJobs of one id, attempts in order) through decode ->
    chunks -> one FleetEngine, paced one step per batch; `(job, True)` ends with the job's `end`,
    `(job, False)` is killed after its last step: nothing more, then `gap_s` of silence (ticks
    every 0.5 s) before the next launch's `start`. `backlog`: every chunk says the decode stage
    reads 30 s behind (the worker's clock cannot judge a silence)."""
    from producers.simulator.fleet import FleetJob
    from schemas import encode
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch

    fleet = FleetEngine(cfg if isinstance(cfg, DetectionConfig) else DetectionConfig())
    out: list[object] = []
    now = T0
    step_ns = int(paced_s * 1e9)

    def feed(raws: list[bytes], advance_ns: int) -> None:
        nonlocal now
        chunks, _ = decode_batch(raws, 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"] = (30_000_000_000, 50_000) if backlog else (0, 0)
            out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
        for _ in range(4):
            now += advance_ns // 4
            out.extend(fleet.tick(now))

    for job, ends in launches:
        assert isinstance(job, FleetJob)
        start, end = job.job_events()
        feed([encode(start)], step_ns)
        for events in job.iter_steps():
            feed([encode(e) for e in events], step_ns)
        if ends:
            feed([encode(end)], step_ns)
        for _ in range(int(gap_s / 0.5)):
            now += 500_000_000
            out.extend(fleet.tick(now))
    for _ in range(40):  # the worker goes on ticking after the last report (a backlog's end expires)
        now += 500_000_000
        out.extend(fleet.tick(now))
    return out


def feed_engine(batches: list[list[bytes]], *, batch: int = 2048, behind: tuple[int, int] | None = (0, 0),
                drain_ticks: int = 100) -> list[object]:
    """Raw records through decode -> the chunk codec -> one FleetEngine, in the order given: `batch`
    records per decode call, 50 ms of worker clock each, then `drain_ticks` ticks of 0.5 s without
    input. `behind`: what every chunk says of the decode stage, (behind_ns, lag); None: nothing."""
    from streams.detect.combine import chunks as codec
    from streams.detect.config import DetectionConfig
    from streams.detect.engine import FleetEngine
    from streams.detect.ingest.decode import decode_batch

    fleet = FleetEngine(DetectionConfig())
    out: list[object] = []
    now = T0
    for raws in batches:
        for i in range(0, len(raws), batch):
            chunks, _ = decode_batch(raws[i:i + batch], 1 << 20)
            for chunk in chunks:
                if behind is not None:
                    chunk["behind_ns"], chunk["lag"] = behind
                out.extend(fleet.on_chunk(codec.loads(codec.dumps(chunk)), now))
            now += 50_000_000
            out.extend(fleet.tick(now))
    for _ in range(drain_ticks):
        now += 500_000_000
        out.extend(fleet.tick(now))
    return out


class AckedStream:
    """Stands in for a detect worker's Faust stream where a test drives the worker's handlers itself: acks
    are accepted and dropped."""

    async def ack(self, event: object) -> None:
        return None


def alerts_topic(settings: Settings) -> list[Incident]:
    """Every incident message on `settings`' alerts topic so far (from the start; 3 s without a new one ends it)."""
    from schemas import Topics, decode_as

    consumer = KafkaConsumer(Topics(settings.topic_prefix).incidents, **kafka_client_config(settings, "admin"),
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        return [decode_as(Incident, m.value) for m in consumer]
    finally:
        consumer.close()
