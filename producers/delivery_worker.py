"""The emitter's worker thread: carries out the delivery state machine's decisions with the exporter and the spool.

Why apart: the training thread's side of the emitter (producers/emitter.py) only encodes and
queues; everything that waits (an export on producers/export_thread.py's thread, the spool's
disk, replay after an outage, the last export at close) happens on this one daemon worker. It
asks producers/delivery.py what to do and when, under the emitter's lock, and does the I/O
outside it, so the training thread never waits for more than a few counter updates.

With packing on (contract 1.2) only what is handed to the exporter is packed
(producers/packing.py); the queue, the spool, the counters and the drops stay per event.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence

from producers.delivery import CLOSED, EXPORT_FAILED, Delivery, delivered_prefix, failed_of, held_failure, per_event
from producers.export_thread import ExportThread
from producers.exporter import Abortable, Exporter, OutRecord
from producers.packing import pack_records
from producers.spool import Spool

log = logging.getLogger(__name__)

Packed = tuple[Sequence[OutRecord], dict[int, tuple[OutRecord, ...]]]


class DeliveryWorker:
    """One daemon thread driving `state` (under `cv`'s lock): batches to the exporter, outages to the spool.

    `spool_lock`: the fd of the spool directory's lock, closed when the worker stops. `packable`:
    the topics whose events are packed when `pack` is on; `max_packed`: (events, bytes) per record.
    """

    def __init__(
        self,
        exporter: Exporter,
        state: Delivery,
        cv: threading.Condition,
        spool: Spool | None,
        spool_lock: int | None,
        *,
        name: str,
        pack: bool,
        packable: frozenset[str],
        max_packed: tuple[int, int],
    ) -> None:
        self._exporter = exporter
        self._state = state
        self._cv = cv
        self._spool = spool
        self._spool_lock = spool_lock
        self._batch_size = state.batch_size
        self._pack = pack
        self._packable = packable
        self._max_packed = max_packed
        # Leading events of the fresh export in flight already written to the spool's head: see _hold_in_spool.
        self._tentative = 0
        # Exports run on their own thread, so the worker can move queue overflow to the spool
        # while an export hangs (a broker timing out) instead of dropping it as queue_full.
        self._export_pool = ExportThread(exporter, f"{name}-export")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # a dead worker only loses telemetry
            log.exception("steplens emitter worker crashed; further events are dropped")
            with self._cv:
                self._state.crash()
        finally:
            try:
                self._exporter.close()
            except Exception:
                log.debug("exporter close raised", exc_info=True)
            self._export_pool.shutdown()
            if self._spool_lock is not None:
                os.close(self._spool_lock)
                self._spool_lock = None
            with self._cv:
                self._state.worker_stopped()
                self._cv.notify_all()

    def _loop(self) -> None:
        state = self._state
        while True:
            with self._cv:
                while True:
                    now = time.monotonic()
                    action, wake_at = state.decide(now)
                    if action is not None:
                        break
                    self._cv.wait(max(wake_at - now, 0.001))
                batch: list[OutRecord] = []
                token = -1
                if action in ("spool", "export"):
                    batch, token = state.pop_batch(time.monotonic())
            if action == "finish":
                self._finish()
                return
            if action == "export":
                self._export_fresh(batch)
                self._settle(token)
            else:
                if token >= 0:
                    if batch:
                        self._to_spool(batch)
                    self._settle(token)
                with self._cv:
                    replay = state.replay_due(time.monotonic())
                if replay:
                    self._replay()
            with self._cv:
                self._cv.notify_all()

    def _settle(self, token: int) -> None:
        with self._cv:
            self._state.settle(token)
            self._cv.notify_all()

    def _packed(self, records: Sequence[OutRecord]) -> Packed:
        """What to hand the exporter for these events, and each packed record's events (by id)."""
        if not self._pack:
            return records, {}
        packed = pack_records(records, self._packable, max_events=self._max_packed[0],
                              max_bytes=self._max_packed[1])
        return [p.record for p in packed], {id(p.record): p.members for p in packed}

    def _export(self, records: Sequence[OutRecord], *, fresh: bool = False, packed: Packed | None = None) -> None:
        """Export (packed when on) on the export thread; meanwhile keep the queue from overflowing.

        While the export waits, queued records go to the spool when the queue reaches its high-water
        mark or, once the export has stalled (waited stall_s), as each batch comes due; a `fresh`
        export's own records go to the spool's head first (_hold_in_spool). Closing, a stalled
        export is aborted at the state's `abort_at` so that its records can be spooled. Raises what
        the exporter raised, its `failed` records given as events. `packed`: `_packed(records)`, when
        the caller already has it.
        """
        state = self._state
        out, members = packed if packed is not None else self._packed(records)
        started = time.monotonic()
        future = self._export_pool.submit(out)
        future.add_done_callback(self._wake_worker)
        aborted = False
        while True:
            with self._cv:
                while not future.done():
                    now = time.monotonic()
                    if state.abort_due(now, aborted):
                        break
                    if state.overflowing() or state.stall_due(now, started):
                        break
                    self._cv.wait(state.export_wait(now, started, aborted))
                done = future.done()
                abort = not done and state.closing and not aborted
            if abort:
                aborted = True
                if isinstance(self._exporter, Abortable):
                    self._exporter.abort()
                continue
            if not done:
                self._on_stall(started)
                if fresh and not self._tentative:
                    self._hold_in_spool(records)
                self._drain_queue_to_spool(keep_in_flight=True)
                continue
            exc = future.exception()
            if exc is not None:
                failure = per_event(exc, members)
                if failure is exc:
                    raise exc
                raise failure from exc
            with self._cv:
                state.records_sent += len(out)
            return

    def _on_stall(self, started: float) -> None:
        """The exporter is waiting on its transport: report unhealthy, so fresh records spool."""
        with self._cv:
            if self._state.on_stall():
                log.warning("steplens export waiting for %.1f s; spooling newer events meanwhile",
                            time.monotonic() - started)
            self._cv.notify_all()

    def _hold_in_spool(self, records: Sequence[OutRecord]) -> None:
        """Write the stalled fresh export's events to the (empty) spool before anything newer.

        Newer events are about to be drained to the spool behind them; if the export then fails,
        its events are already ahead of them, in emission order (appending them after the export
        failed put them behind: a rank's first steps arrived after its later ones). If it succeeds,
        _export_fresh takes them off the spool's head again. They count as pending in the spool,
        not in flight, meanwhile.
        """
        assert self._spool is not None  # drains happen only with a spool
        if not self._spool.empty:  # cannot happen (fresh exports run with an empty spool): keep the old order
            return
        stored = self._spool.append(records)
        with self._cv:
            self._tentative = stored
            self._state.hold(stored)
            self._sync_spool_locked()

    def _release_held(self, delivered: int) -> None:
        """The first `delivered` held events went out: take them off the spool's head."""
        assert self._spool is not None
        if delivered:
            self._spool.peek(delivered)
            self._spool.consume(delivered)
        with self._cv:
            self._sync_spool_locked()

    def _sync_spool_locked(self) -> None:
        """The spool's counts as the stats report them, after any change to the spool."""
        assert self._spool is not None
        self._state.sync_spool(self._spool.pending, self._spool.bytes)

    def _wake_worker(self, _future: object = None) -> None:
        with self._cv:
            self._cv.notify_all()

    def _export_fresh(self, batch: list[OutRecord]) -> None:
        """Export a batch from the queue; with packing on, its events in the order of their packed records.

        Each (topic, key) keeps its order, so nothing changes on the wire, but an export whose
        later records fail then fails a suffix of the batch: the spool, which can only skip a
        delivered prefix, takes the delivered events off its head instead of sending them again
        (held in emission order, rank 0's delivered steps sat between rank 1's failed ones).
        """
        out, members = self._packed(batch)
        if members:
            batch = [e for r in out for e in members[id(r)]]
        self._tentative = 0
        try:
            self._export(batch, fresh=True, packed=(out, members))
        except Exception as exc:  # any exporter failure is an outage
            failed = failed_of(exc, batch)
            held, self._tentative = self._tentative, 0
            if held:
                self._fail_held(exc, batch, failed, held)
                return
            self._on_failure(exc, delivered=len(batch) - len(failed))
            if self._spool is not None:
                self._to_spool(failed)
            else:
                with self._cv:
                    self._state.drop_in_flight(EXPORT_FAILED, len(failed))
            return
        held, self._tentative = self._tentative, 0
        if held:
            self._release_held(held)
        with self._cv:
            self._state.exported_events(len(batch), in_flight_after=0)
            self._on_success_locked()

    def _fail_held(self, exc: BaseException, batch: list[OutRecord], failed: list[OutRecord], held: int) -> None:
        """A fresh export failed after its first `held` events were put at the spool's head: carry out
        `held_failure` (take a delivered prefix off again, count, append the failed rest)."""
        plan = held_failure(batch, failed, held)
        self._release_held(plan.release)
        self._on_failure(exc, delivered=plan.delivered)
        with self._cv:
            self._state.spooled += plan.spooled
        if plan.rest:
            self._to_spool(plan.rest)
        else:
            with self._cv:
                self._state.in_flight = 0
                self._cv.notify_all()

    def _to_spool(self, batch: Sequence[OutRecord], in_flight_after: int = 0) -> None:
        """Append in order; what does not fit under max_spool_bytes is dropped as spool_full."""
        assert self._spool is not None
        before = self._spool.bytes
        stored = self._spool.append(batch) if batch else 0
        with self._cv:
            self._state.spool_appended(batch, stored, before, self._spool.max_bytes, in_flight_after)
            self._sync_spool_locked()
            self._cv.notify_all()

    def _drain_queue_to_spool(self, keep_in_flight: bool = False) -> None:
        """Keep the queue short while the exporter is slow: newer records queue up behind the spool.

        `keep_in_flight`: an export is under way; its records stay counted as in flight.
        """
        with self._cv:
            rest, token, in_flight = self._state.drain_queue(keep_in_flight=keep_in_flight)
        if rest:
            self._to_spool(rest, in_flight_after=in_flight)
        else:
            with self._cv:
                self._state.in_flight = in_flight
        self._settle(token)

    def _replay(self) -> None:
        """Send the spool oldest first until it is empty or the exporter fails again."""
        try:
            self._replay_spool()
        except OSError as exc:  # the spool's disk went bad: back off and try again later
            log.warning("steplens spool unreadable", exc_info=True)
            self._on_failure(exc, delivered=0)

    def _replay_spool(self) -> None:
        assert self._spool is not None
        while True:
            self._drain_queue_to_spool()
            with self._cv:
                if self._state.closing:
                    return
            if self._spool.empty:
                break
            records = self._spool.peek(self._batch_size)
            if not records:  # only unreadable bytes were left
                self._spool.consume(0)
                with self._cv:
                    self._sync_spool_locked()
                if self._spool.empty:
                    break
                continue
            try:
                self._export(records)
            except Exception as exc:
                # The spool can only skip a delivered prefix; anything else is resent (at-least-once).
                delivered = delivered_prefix(records, failed_of(exc, records))
                if delivered:
                    self._spool.consume(delivered)
                    self._count_replayed(delivered)
                self._on_failure(exc, delivered=0)
                return
            self._spool.consume(len(records))
            self._count_replayed(len(records))
        with self._cv:
            self._sync_spool_locked()
            self._on_success_locked()
            self._cv.notify_all()

    def _count_replayed(self, n: int) -> None:
        with self._cv:
            self._state.replayed_events(n)
            self._sync_spool_locked()
            self._cv.notify_all()

    def _on_failure(self, exc: BaseException, delivered: int) -> None:
        with self._cv:
            if self._state.on_failure(delivered, time.monotonic()):
                log.warning("steplens export failed (%s); %s and retrying", exc,
                            "spooling" if self._spool is not None else "dropping")
            self._cv.notify_all()

    def _on_success_locked(self) -> None:
        if self._state.on_success():
            log.info("steplens export recovered")

    def _finish(self) -> None:
        """Closing: export what is left if the exporter works, else keep it in the spool."""
        state = self._state
        with self._cv:
            rest, token, _ = state.drain_queue(keep_in_flight=False)
            spooling = state.spooling()
            healthy = state.healthy
        if not spooling and healthy:
            while rest:
                chunk = rest[: self._batch_size]
                try:
                    self._export(chunk)  # on the export thread: a stalled one is aborted at abort_at
                except Exception as exc:
                    failed = failed_of(exc, chunk)
                    self._on_failure(exc, delivered=len(chunk) - len(failed))
                    rest = failed + rest[len(chunk):]
                    break
                rest = rest[len(chunk):]
                with self._cv:
                    state.exported_events(len(chunk), in_flight_after=len(rest))
        if not rest:
            with self._cv:
                state.in_flight = 0
        elif self._spool is not None:
            self._to_spool(rest)
        else:
            with self._cv:
                state.drop_in_flight(CLOSED, len(rest))
        self._settle(token)


__all__ = ["DeliveryWorker"]
