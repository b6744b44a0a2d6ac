"""The `detect` Faust app: batch-at-a-time detection over every event type.

Two stages, one shuffle:
1. the decode loop (streams/detect/ingest/loop.py, a kafka-python consumer thread: the per-event
   hot path without Faust's per-message cost) takes up to `batch_max` raw messages from steps,
   kernel-summaries, device and jobs (keyed per rank upstream), decodes them straight to
   column chunks and sends ONE chunk per (job, kind) to the internal partials topic, keyed by job.
2. `detect` owns jobs (partitions of the partials topic): merges chunks into step frames,
   runs scopes and rules, keeps incident books (streams/detect/engine.py), snapshots each changed
   job with its outbox of incidents and commands (streams/detect/state/), THEN sends the outbox,
   THEN acknowledges the chunks it applied.
The landing worker dead-letters bad input; here it is only counted and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import faust

from infra.settings import Settings
from schemas import ControlCommand, Incident, Topics, bounded
from streams.app import base_app, now_ns, raw_topic
from streams.detect.combine import chunks as chunk_codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine, JobEngine, Output
from streams.detect.ingest.loop import DecodeLoop
from streams.detect.ingest.process import DecodeProcess
from streams.detect.state.outbox import Outbox, Position, scan_start
from streams.detect.state.store import SnapshotStore
from streams.detect.state.store import encode as encode_snapshot
from streams.metrics import Announce, DetectMetrics, kafka_has_c_crc32c
from streams.topics_admin import DetectTopics

log = logging.getLogger(__name__)
TICK_BUSY_NS = 500_000_000  # a tick longer than the timer interval: the engine was busy
SNAPSHOT_SLICE_S = 0.05  # the longest the event loop waits while snapshots encode


def newly_finished(before: set[str], jobs: Mapping[str, JobEngine]) -> set[str]:
    """Jobs finished now that were not in `before`. A job can finish in a tick without an output (its
    last frames released clean, a relaunch's replaced attempt closed): without a snapshot of its own
    it would be evicted with an unfinished snapshot on the state topic, restored on every restart."""
    return {j for j, e in jobs.items() if e.finished and j not in before}


def _foreign(engine: JobEngine, owned: set[int]) -> bool:
    """A job whose input came from none of the `owned` partials partitions (one without input yet
    has no known partition: not foreign)."""
    return bool(engine.offsets) and not set(engine.offsets) & owned


class DetectWorker:
    """The I/O around the pure engine: pending acks per job, snapshots with outboxes, output topics.

    Per batch: apply chunks → outputs into the jobs' outboxes → snapshot (state, input
    offsets, outbox; flushed) → send the outboxes → acknowledge the input. See
    streams/detect/state/outbox.py for why this order sends every output once under SIGKILL.
    """

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self.settings = settings
        self.cfg = DetectionConfig.of(settings)
        self.topics = Topics(settings.topic_prefix)
        self.internal = DetectTopics(settings.topic_prefix)
        self.fleet = FleetEngine(self.cfg)
        self.store = SnapshotStore(settings, self.internal.state)
        self.metrics = DetectMetrics()
        self.partials = raw_topic(app, self.internal.partials)
        self.out_topics: dict[type, str] = {Incident: self.topics.incidents, ControlCommand: self.topics.control}
        self.outboxes: dict[str, Outbox] = {}
        self.out_pos: dict[Position, int] = {}  # output topic positions no later send can precede
        self.pending: dict[str, list[Any]] = {}   # job -> events applied, not yet acked
        self.dirty: set[str] = set()
        self.lock = asyncio.Lock()
        self.last_snapshot = time.monotonic()
        self.snapshot_pause = self.cfg.snapshot_interval_s  # seconds from one unforced snapshot to the next
        self.restored = False
        # set while no restore runs: chunks wait for it. Faust resumes the flow before an
        # on_partitions_assigned handler's restore has loaded the snapshots, and a chunk applied
        # meanwhile created a fresh engine that restore then kept as "newer" than the job's
        # snapshot: its open incidents were lost and opened again under new ids (make soak, after a
        # second detect worker was SIGKILLed: outbox seq back at 1, a second SLOW_RANK incident)
        self.restore_done = asyncio.Event()
        self.stream: Any = None

    async def restore(self, owned: set[int] | None = None) -> None:
        """Newest snapshot of every job; jobs this worker is already running keep their live state.

        `owned`: the partials partitions assigned to this worker, when known; snapshots of jobs
        that live on other partitions are left to their owners.

        Outboxes restored with pending outputs are checked against the output topics: what
        is already there is dropped, the rest goes out with the next snapshot.
        """
        self.restore_done.clear()
        try:
            await self._restore(owned)
        finally:
            self.restore_done.set()

    async def _restore(self, owned: set[int] | None) -> None:
        loop = asyncio.get_running_loop()
        names = list(self.out_topics.values())
        snaps = await loop.run_in_executor(None, self.store.load, self.cfg)
        async with self.lock:
            if not self.out_pos:
                self.out_pos = await loop.run_in_executor(None, self.store.end_offsets, names)
            if owned is not None:
                self._drop_foreign(owned)
            restored: list[Outbox] = []
            for job, (engine, outbox) in snaps.items():
                if owned is not None and _foreign(engine, owned):
                    continue
                live = self.fleet.jobs.get(job)
                if live is not None and self._newer(live, engine):
                    continue
                engine.frames.input_lagging = True  # its reports since the snapshot are still queued: no timeouts
                self.fleet.jobs[job] = engine
                self.outboxes[job] = outbox
                restored.append(outbox)
            unsure = [box for box in restored if box.pending]
            if unsure:
                delivered = await loop.run_in_executor(None, self.store.delivered, names, scan_start(unsure))
                for box in unsure:
                    dropped = box.drop_delivered(delivered)
                    log.info("job %r: %d restored outputs were already sent, %d to send", box.job, dropped,
                             len(box.pending))
                    self.dirty.add(box.job)
            self.restored = True
        log.info("restored %d job states", len(self.fleet.jobs))

    def _drop_foreign(self, owned: set[int]) -> None:
        """Jobs whose partials partitions this worker does not own now are another worker's.

        The agent's first restore, before any assignment, loads every job on the state topic. A
        copy of a job another worker owns then stayed here, ticking without input and writing its
        snapshots over the owner's: the owner, restoring after the next rebalance, lost the job's
        open incidents and opened them again under new ids (make chaos-cluster, workers_kill).
        A job without input yet (no partition known) stays.
        """
        for job, engine in list(self.fleet.jobs.items()):
            if _foreign(engine, owned):
                self._let_go(job, "belongs to another worker: dropped")

    def _let_go(self, job: str, why: str) -> None:
        """Forget a job another worker owns (its state is on the state topic)."""
        del self.fleet.jobs[job]
        self.outboxes.pop(job, None)
        self.pending.pop(job, None)
        self.dirty.discard(job)
        log.info("job %r %s", job, why)

    async def on_revoked(self, partitions: set[int]) -> None:
        """Jobs whose partials partitions went to another worker: last snapshot, then let go.

        A copy kept here would get no more input and keep ticking: its windows would time out
        into false hangs, and incidents the new owner also emits would go out twice. The forced
        snapshot hands the new owner this worker's latest state and sends its outboxes first.
        """
        # chunks wait for the next assignment's restore: one applied in between (fetched before the
        # revoke, or of a partition assigned back) made a fresh engine for its dropped job, which that
        # restore kept as newer than the job's snapshot: its open incidents opened again under new ids
        # (make chaos-cluster, workers_kill)
        self.restore_done.clear()
        if not partitions:
            return
        async with self.lock:
            await self._maybe_snapshot(force=True)
            for job, engine in list(self.fleet.jobs.items()):
                if engine.offsets and set(engine.offsets) <= partitions:
                    self._let_go(job, "moved to another worker: state handed over")

    @staticmethod
    def _newer(live: JobEngine, snap: JobEngine) -> bool:
        return all(live.offsets.get(p, -1) >= o for p, o in snap.offsets.items())

    def _queue(self, outputs: list[Output]) -> None:
        """Outputs into their job's outbox (sent after the next snapshot)."""
        for item in outputs:
            item = bounded(item)  # the one cap on event text copied into our own events
            box = self.outboxes.get(item.job)
            if box is None:
                box = self.outboxes[item.job] = Outbox(item.job)
            box.add([item], self.out_pos)
            self.dirty.add(item.job)

    async def on_chunks(self, events: list[Any]) -> None:
        while True:
            await self.restore_done.wait()  # the jobs' restored state first, then their input
            async with self.lock:
                if self.restore_done.is_set():  # no rebalance began while this batch waited for the lock
                    await self._apply_chunks(events)
                    return

    async def _apply_chunks(self, events: list[Any]) -> None:
        """Chunks into their jobs' engines (under the lock, after the owned jobs' restore)."""
        now = now_ns()
        outputs: list[Output] = []
        for event in events:
            msg = event.message
            try:
                chunk = chunk_codec.loads(msg.value)
            except ValueError:
                self.metrics.bad.inc()
                await self.stream.ack(event)
                continue
            job = chunk.get("job") or ""
            engine = self.fleet.jobs.get(job) if job else None
            if engine is not None and msg.offset <= engine.offsets.get(msg.partition, -1):
                await self.stream.ack(event)  # already inside the restored snapshot
                continue
            try:
                outputs.extend(self.fleet.on_chunk(chunk, now))
            except Exception as exc:  # a chunk this worker's decode stage did not write: skip, keep going
                self.metrics.bad.inc()
                log.warning("skipped a malformed chunk at %r[%d]@%d: %r", msg.topic, msg.partition, msg.offset,
                            f"{type(exc).__name__}: {exc}"[:300])
                await self.stream.ack(event)
                continue
            engine = self.fleet.jobs.get(job) if job else None
            if engine is None:
                await self.stream.ack(event)
                continue
            engine.offsets[msg.partition] = msg.offset
            self.pending.setdefault(job, []).append(event)
            self.dirty.add(job)
        self.fleet.heard(now_ns())
        self._queue(outputs)
        await self._maybe_snapshot(force=bool(outputs))

    async def on_tick(self) -> None:
        async with self.lock:
            now = now_ns()
            before = {j for j, e in self.fleet.jobs.items() if e.finished}
            outputs = self.fleet.tick(now)
            if now_ns() - now > TICK_BUSY_NS:
                self.fleet.heard(now_ns())  # a long tick is the engine busy, not the input silent
            self._queue(outputs)
            ended = newly_finished(before, self.fleet.jobs)
            self.dirty |= ended  # a job that finished in this tick, even silently, gets its final snapshot first
            # outputs go out now; otherwise snapshots keep to snapshot_interval_s: each one holds the
            # lock while it encodes each changed job (10-15 ms at 10,240 ranks on a fast box), and a chunk completing a
            # frame waits behind it
            await self._maybe_snapshot(force=bool(outputs) or bool(ended))
            for job in [j for j, e in self.fleet.jobs.items() if e.finished and j not in self.pending
                        and j not in self.dirty and not (j in self.outboxes and self.outboxes[j].pending)]:
                done = self.fleet.evict(job)  # its final snapshot (finished, outbox empty) is on the state topic
                log.info("job %r finished: %d frames evaluated (%d incomplete), %d late reports", job,
                         done.stats.frames, done.frames.stats.incomplete, done.frames.stats.late)
                self.outboxes.pop(job, None)
            m = self.metrics
            m.open_windows.set(self.fleet.open_windows())
            m.open_incidents.set(self.fleet.open_incidents())
            m.jobs.set(len(self.fleet.jobs))
            m.lag.set(sum(len(v) for v in self.pending.values()))
            for engine in self.fleet.jobs.values():
                m.add_rule_times(engine.stats.rule_seconds)

    async def _maybe_snapshot(self, force: bool) -> None:
        if not self.dirty:
            return
        if not force and time.monotonic() - self.last_snapshot < self.snapshot_pause:
            return
        loop = asyncio.get_running_loop()
        self.last_snapshot = time.monotonic()
        jobs = sorted(self.dirty)
        snaps = {}
        encoding = 0.0  # this thread's CPU in the encoder: the decode thread and Kafka's run beside it
        slice_start = time.monotonic()
        for job in jobs:
            if job in self.fleet.jobs:
                started = time.thread_time()
                snaps[job] = encode_snapshot(self.fleet.jobs[job], self.outboxes.get(job))
                encoding += time.thread_time() - started
            if time.monotonic() - slice_start > SNAPSHOT_SLICE_S:
                # hundreds of dirty jobs encode for seconds (24 s in the >= 2 M reference run's backlog):
                # the loop's heartbeats, fetches and commits run between slices; the jobs stay under the lock
                await asyncio.sleep(0)
                slice_start = time.monotonic()
        self.snapshot_pause = snapshot_pause(self.cfg, encoding)
        self.metrics.snapshot_seconds.inc(encoding)
        await loop.run_in_executor(None, self.store.write, snaps)
        self.metrics.snapshots.inc(len(snaps))
        self.dirty.clear()
        boxes = [self.outboxes[job] for job in jobs if job in self.outboxes and self.outboxes[job].pending]
        if boxes:
            outputs = [entry for box in boxes for entry in box.take()]
            after = await loop.run_in_executor(None, self.store.send_outputs, self.out_topics, outputs,
                                               scan_start(boxes))
            for pos, offset in after.items():
                self.out_pos[pos] = max(self.out_pos.get(pos, 0), offset)
            for box in boxes:
                box.sent()
                self.dirty.add(box.job)  # the next snapshot records the outbox empty (restores scan nothing)
            for _, item in outputs:
                if isinstance(item, Incident):
                    log.warning("incident %s %r: %r", item.state, item.incident_id, item.summary)
                self.metrics.events_out.labels(self.out_topics[type(item)]).inc()
        for job in jobs:
            for event in self.pending.pop(job, []):
                await self.stream.ack(event)


def snapshot_pause(cfg: DetectionConfig, encoding_s: float) -> float:
    """Seconds before the next unforced snapshot after one that took `encoding_s` of CPU to encode:
    `snapshot_interval_s`, stretched so that encoding takes at most `snapshot_max_share` of the worker's
    time, never past `snapshot_interval_max_s`. A big job's snapshot is a cost per second that its events
    pay (a 10,240-rank job: 9-15 ms a second, ~0.4 µs of detect's ~8 µs per event on a 2-core box); what a
    longer pause costs is the chunks a restarted worker replays (acks wait for the snapshot). Outputs
    force a snapshot whatever the pause: alerts never wait for it."""
    if cfg.snapshot_max_share <= 0:
        return cfg.snapshot_interval_s
    stretched = encoding_s / cfg.snapshot_max_share
    return max(cfg.snapshot_interval_s, min(stretched, cfg.snapshot_interval_max_s))


def create_detect_app(settings: Settings) -> faust.App:
    app = base_app(settings, "detect")
    worker = DetectWorker(app, settings)
    cfg = worker.cfg
    if not kafka_has_c_crc32c():
        log.warning("kafka-python runs without the C crc32c: install the pinned `crc32c` package")

    decoder: DecodeLoop | DecodeProcess | None = None
    if settings.detect_runs_decode:  # else `--role decode` workers feed the partials topic (ingest/worker.py)
        decoder = (DecodeProcess if settings.detect_decode_process else DecodeLoop)(settings, worker.metrics)

        async def start_decoder() -> None:
            assert decoder is not None
            decoder.start()

        async def stop_decoder(*args: Any, **kwargs: Any) -> None:
            assert decoder is not None
            await asyncio.get_running_loop().run_in_executor(None, decoder.stop)

        app.task(start_decoder)
        app.on_before_shutdown.connect(stop_decoder)

    @app.agent(worker.partials, concurrency=1)
    async def detect(stream: Any) -> None:
        """Chunks of the jobs this worker owns -> engine -> incidents, control, snapshots."""
        worker.stream = stream
        if not worker.restored:
            await worker.restore()
        async for events in stream.noack_take(1000, within=cfg.detect_within_s):
            worker.metrics.batch.labels("detect").observe(len(events))
            await worker.on_chunks(events)

    async def tick() -> None:
        if decoder is not None and decoder.failed is not None:
            raise RuntimeError("the decode loop failed") from decoder.failed
        if worker.stream is not None and worker.restored:
            await worker.on_tick()

    app.timer(interval=0.5)(tick)

    def _partials(tps: Any) -> set[int]:
        return {tp.partition for tp in tps if tp.topic == worker.internal.partials}

    async def on_assigned(*args: Any, **kwargs: Any) -> None:  # (sender, assigned TPs)
        worker.restored = False
        worker.restore_done.clear()  # before anything yields: no chunk may slip in ahead of the restore
        await worker.restore(_partials(args[1]) if len(args) > 1 else None)

    app.on_partitions_assigned.connect(on_assigned)

    async def on_revoked(*args: Any, **kwargs: Any) -> None:  # (sender, revoked TPs)
        await worker.on_revoked(_partials(args[1]) if len(args) > 1 else set())

    app.on_partitions_revoked.connect(on_revoked)
    worker.metrics.serve(cfg.metrics_port, Announce.from_settings(settings))

    async def report() -> None:
        log.info("detect jobs=%d open_windows=%d open_incidents=%d snapshots=%d input_lagging=%s",
                 len(worker.fleet.jobs), worker.fleet.open_windows(), worker.fleet.open_incidents(),
                 worker.store.written, worker.fleet.lagging_now(now_ns()))

    app.timer(interval=10.0)(report)
    return app
