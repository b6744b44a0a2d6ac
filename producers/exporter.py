"""Where encoded events go: the exporter seam between the emitter and a transport.

The emitter only ever talks to an `Exporter`, so the training-side code path is the same
whether events go to Kafka (`KafkaExporter`) or to a list in a test (`InMemoryExporter`).
An exporter reports failure by raising `ExportError`; the emitter then spools the records
and retries later, so an exporter never has to buffer or retry on its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from infra.lograte import install_rate_limit

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One encoded message, ready for a topic: what the spool stores and the exporter sends."""

    topic: str
    key: bytes | None
    value: bytes


class ExportError(Exception):
    """An export did not (fully) succeed.

    `failed` lists the records that are not known to be delivered, in input order; None means
    the whole batch. Records of a batch that did get through are left out so a retry does not
    duplicate them.
    """

    def __init__(self, message: str, failed: Sequence[OutRecord] | None = None) -> None:
        super().__init__(message)
        self.failed: tuple[OutRecord, ...] | None = tuple(failed) if failed is not None else None


@runtime_checkable
class Exporter(Protocol):
    """Sends batches of records; called from one background thread only."""

    def export(self, records: Sequence[OutRecord]) -> None:
        """Deliver `records` (in order) or raise ExportError; must return within a bounded time."""
        ...

    def flush(self, timeout: float) -> bool:
        """Wait until everything handed to `export` is delivered; False on timeout."""
        ...

    def close(self) -> None:
        """Release connections; later exports may fail."""
        ...


@runtime_checkable
class Abortable(Protocol):
    """An exporter whose export may wait for as long as its transport is down (KafkaExporter in place).

    The emitter calls `abort` from another thread when it is closing: the running export then
    returns at once, raising ExportError with the records not known to be delivered, so they can
    go to the spool before the process exits; later exports fail.
    """

    def abort(self) -> None:
        ...


class InMemoryExporter:
    """Keeps exported records in a list: the test double for Kafka.

    `failing = True` makes every export raise ExportError (Kafka down). `gate`, when given,
    makes export wait until the event is set (a hung broker); `entered` is set each time an
    export starts so a test can tell the worker is inside the exporter.
    """

    def __init__(self, *, failing: bool = False, gate: threading.Event | None = None) -> None:
        self.failing = failing
        self.gate = gate
        self.entered = threading.Event()
        self.records: list[OutRecord] = []
        self.calls = 0
        self.failures = 0
        self.closed = False
        self._cv = threading.Condition()

    def export(self, records: Sequence[OutRecord]) -> None:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        with self._cv:
            self.calls += 1
            if self.failing or self.closed:
                self.failures += 1
                raise ExportError("in-memory exporter is set to fail" if self.failing else "exporter is closed")
            self.records.extend(records)
            self._cv.notify_all()

    def flush(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def wait_for_count(self, count: int, timeout: float) -> bool:
        """Block (the test, never the emitter) until at least `count` records arrived."""
        with self._cv:
            return self._cv.wait_for(lambda: len(self.records) >= count, timeout)

    def values(self) -> list[bytes]:
        with self._cv:
            return [r.value for r in self.records]


Compression = Literal["none", "lz4"]
# How a record whose acknowledgement does not come is delivered (KafkaExporter):
# "in_place": the export waits, the same idempotent producer retries it with its sequence number
#             until the broker takes it (the broker drops a copy it already has): exactly once;
# "resend":   the export gives up after export_timeout_s, the producer is discarded and the emitter
#             spools the record and sends it again with a new producer: at-least-once, bounded exports.
Redelivery = Literal["in_place", "resend"]
# In place, batches never expire inside the producer (a week): the emitter's abort is what ends a wait.
IN_PLACE_DELIVERY_TIMEOUT_MS = 7 * 24 * 3600 * 1000
IN_PLACE_MAX_BLOCK_MS = 1000  # one in-place send attempt's wait for metadata or buffer space
ABORT_POLL_S = 0.25  # how often an in-place wait looks at abort(); acks themselves wake it at once


def _waits_for_broker(exc: BaseException) -> bool:
    """A send that failed only because the broker is away (no metadata, no buffer space in time)."""
    from kafka.errors import KafkaError

    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


def lz4_available() -> bool:
    """True when kafka-python can find an lz4 implementation."""
    try:
        from kafka.codec import has_lz4
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        return False
    return bool(has_lz4())


class KafkaExporter:
    """Sends records with an idempotent kafka-python producer and waits for the acks of each batch.

    The producer is created lazily on the first export (in the emitter's worker thread), so
    constructing the exporter never blocks the training process even when the broker is down.

    Redelivery "in_place" (the default) makes delivery exactly once across a broker outage: an
    export whose acks do not come keeps waiting while the *same* producer retries its batches with
    their producer id and sequence numbers, so a batch the broker wrote before it went away is
    dropped as a duplicate when it comes back (the broker restores producer state from its log).
    Meanwhile the emitter moves newer records to its spool (they were never handed to Kafka, so
    sending them later duplicates nothing). Only `abort()` (the emitter closing while the broker is
    still down) ends the wait early: what was not acknowledged by then is spooled and may be sent
    twice by the next run, the one at-least-once case left. A record `send()` cannot take yet (no
    metadata, no buffer space within max_block_ms) is offered again until it is taken or the export
    is aborted, so an export never ends half delivered while the broker is merely away.

    Redelivery "resend" bounds every export by export_timeout_s: after any failure the producer is
    discarded and a fresh one is built on the next export, so a record whose ack timed out may
    have reached the broker and is sent again from the spool (at-least-once). The node relay uses
    it, since it must answer its ranks within a bound.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "steplens-producer",
        linger_ms: int = 20,
        compression: Compression = "none",
        max_request_size: int = MAX_REQUEST_BYTES,
        export_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        extra_config: dict[str, Any] | None = None,
        redelivery: Redelivery = "in_place",
    ) -> None:
        if redelivery not in ("in_place", "resend"):
            raise ValueError(f"redelivery must be 'in_place' or 'resend', got {redelivery!r}")
        if compression not in ("none", "lz4"):
            raise ValueError(f"compression must be 'none' or 'lz4', got {compression!r}")
        if compression == "lz4" and not lz4_available():
            log.warning("lz4 compression requested but no lz4 library is installed; sending uncompressed")
            compression = "none"
        self.bootstrap = bootstrap
        self.compression: Compression = compression
        self.export_timeout_s = export_timeout_s
        self.redelivery: Redelivery = redelivery
        timeout_ms = max(int(export_timeout_s * 1000), linger_ms + 1000)
        request_timeout_ms = max(timeout_ms - linger_ms, 1000)
        self._config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": client_id,
            "enable_idempotence": True,
            "acks": "all",
            "linger_ms": linger_ms,
            "compression_type": None if compression == "none" else "lz4",
            "max_request_size": max_request_size,
            # Bound every request and every send() by the export timeout. Resending: a batch also
            # fails in time for the emitter to spool it, not after the library's default 2 minutes;
            # in place, it never expires (retried until acknowledged or aborted).
            "request_timeout_ms": request_timeout_ms,
            "delivery_timeout_ms": (IN_PLACE_DELIVERY_TIMEOUT_MS if redelivery == "in_place"
                                    else request_timeout_ms + linger_ms),
            # in place, a send that cannot get metadata is tried again (until abort): a short block
            # keeps abort() prompt
            "max_block_ms": min(timeout_ms, IN_PLACE_MAX_BLOCK_MS) if redelivery == "in_place" else timeout_ms,
            "bootstrap_timeout_ms": int(connect_timeout_s * 1000),
            "reconnect_backoff_max_ms": 1000,
            # kafka-python's client metrics (sensors updated per record and per request on the
            # network thread) are never read here: off, they cost a rank's helper threads nothing
            "metrics_enabled": False,
        }
        if extra_config:
            self._config.update(extra_config)
            # a client-wide request timeout (kafka_request_timeout_s) may only shorten this one: the
            # delivery timeout above must stay >= linger + request timeout
            self._config["request_timeout_ms"] = min(int(self._config["request_timeout_ms"]), request_timeout_ms)
        self._producer: Any = None
        self._closed = False
        self._abort = threading.Event()
        # kafka-python logs every failed connection attempt; an outage must not flood the host's logs
        install_rate_limit(("kafka",))

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer

            self._producer = KafkaProducer(**self._config)
        return self._producer

    def _discard_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=0)
            except Exception:  # a broken producer must not stop the emitter
                log.debug("closing a failed Kafka producer raised", exc_info=True)

    def export(self, records: Sequence[OutRecord]) -> None:
        if self._closed or self._abort.is_set():
            raise ExportError("Kafka exporter is closed")
        if not records:
            return
        deadline = time.monotonic() + self.export_timeout_s
        try:
            producer = self._ensure_producer()
        except Exception as exc:
            raise ExportError(f"cannot connect to Kafka at {self.bootstrap}: {exc}") from exc
        futures: list[Any] = []
        send_error: BaseException | None = None
        while len(futures) < len(records):
            rec = records[len(futures)]
            try:
                futures.append(producer.send(rec.topic, value=rec.value, key=rec.key))
            except Exception as exc:  # no metadata or no buffer space within max_block_ms
                if self.redelivery == "in_place" and _waits_for_broker(exc) and not self._abort.is_set():
                    # in place, a record the producer cannot take yet waits for the broker as an ack
                    # does: failing it while records handed over before it get through made a batch
                    # half delivered (a rank's steps written, its summaries not), and the emitter,
                    # which can only skip a delivered prefix, sent the written half again
                    continue
                send_error = exc
                break
        if send_error is not None and self.redelivery == "resend":
            # Records already handed over may or may not get out: count the whole batch as failed.
            self._discard_producer()
            raise ExportError(f"Kafka send failed: {send_error}") from send_error
        if self.redelivery == "in_place":
            failed, first_error, broken = self._await_in_place(records, futures)
        else:
            failed, first_error, broken = self._await_until(records, futures, deadline)
        failed.extend(records[len(futures):])  # never handed to the producer: nothing to duplicate
        first_error = first_error or send_error
        if broken:
            self._discard_producer()
        if failed:
            raise ExportError(
                f"{len(failed)} of {len(records)} records not acknowledged by Kafka: {first_error}",
                failed=failed,
            )

    def _await_until(self, records: Sequence[OutRecord], futures: list[Any],
                     deadline: float) -> tuple[list[OutRecord], BaseException | None, bool]:
        """Resending: each ack by the export deadline, or the record fails and the producer goes."""
        failed: list[OutRecord] = []
        first_error: BaseException | None = None
        for rec, fut in zip(records, futures, strict=False):
            try:
                fut.get(timeout=max(deadline - time.monotonic(), 0.0))
            except Exception as exc:
                failed.append(rec)
                first_error = first_error or exc
        return failed, first_error, bool(failed)

    def _await_in_place(self, records: Sequence[OutRecord],
                        futures: list[Any]) -> tuple[list[OutRecord], BaseException | None, bool]:
        """In place: wait for every ack however long the broker is away, until abort().

        A record whose future failed (a non-retriable error) was not written: it fails, and the
        producer is replaced since its sequence state may be off. After an abort the producer is
        closed at once, so no record spooled now can still go out from it later.
        """
        failed: list[OutRecord] = []
        first_error: BaseException | None = None
        broken = False
        for rec, fut in zip(records, futures, strict=False):
            while not fut.is_done and not self._abort.is_set():
                with contextlib.suppress(Exception):  # KafkaTimeoutError: not acknowledged yet
                    fut.get(timeout=ABORT_POLL_S)
            if not fut.is_done:
                failed.append(rec)
                first_error = first_error or ExportError("aborted while waiting for Kafka's ack")
                broken = True
            elif fut.failed():
                failed.append(rec)
                first_error = first_error or fut.exception
                broken = True
        return failed, first_error, broken

    def abort(self) -> None:
        """End a running in-place wait now (see Abortable); this exporter exports nothing after it."""
        self._abort.set()

    def flush(self, timeout: float) -> bool:
        if self._producer is None:
            return True
        try:
            self._producer.flush(timeout=timeout)
        except Exception:
            return False
        return True

    def close(self) -> None:
        self._closed = True
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=self.export_timeout_s)
            except Exception:
                log.debug("closing the Kafka producer raised", exc_info=True)
