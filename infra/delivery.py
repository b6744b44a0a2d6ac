"""Send records until the broker has every one, however long it is away.

Shared by the detect worker's decode stage (chunks) and its state store (snapshots and
outputs): a broker restart must only delay them. An expired batch (delivery timeout) or a
send that found no metadata is sent again; after any failure the producer is replaced, as
an idempotent producer whose batches expired can stay wedged once the broker is back
(measured: a 176 s outage left detect waiting forever).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kafka.errors import KafkaError

from infra.backoff import OUTAGE_BACKOFF_S, Backoff

log = logging.getLogger(__name__)


T = TypeVar("T")

FLUSH_TIMEOUT_S = 150.0  # > the producers' 120 s delivery timeout: a flush never blocks for good

Record = tuple[str, bytes, bytes, list[tuple[str, bytes]] | None]  # topic, key, value, headers


def deliver_all(records: Sequence[Record], producer: Callable[[], Any], drop_producer: Callable[[], None],
                wait: Callable[[float], bool], what: str,
                recheck: Callable[[list[int]], list[int]] | None = None) -> list[Any] | None:
    """Each record's metadata, in order, once all are on the broker (None for one that
    `recheck` found there already). `recheck` filters failed sends whose acknowledgement was
    lost but which did reach the broker, so they are not repeated. `wait(s)` sleeps between
    attempts and returns True to give up: then the result is None.
    """
    metas: list[Any] = [None] * len(records)
    todo = list(range(len(records)))
    backoff = Backoff(wait)
    while todo:
        try:
            out = producer()
        except KafkaError as exc:  # no broker to bootstrap from yet
            log.warning("%s producer waits for the broker: %r", what, exc)
            if backoff.pause():
                return None
            continue
        futures: list[tuple[int, Any]] = []
        for i in todo:
            topic, key, value, headers = records[i]
            try:
                futures.append((i, out.send(topic, key=key, value=value, headers=headers)))
            except KafkaError as exc:  # no metadata within max_block_ms: the broker is away
                log.warning("%s send waits for the broker: %r", what, exc)
                break
        try:
            out.flush(timeout=FLUSH_TIMEOUT_S)
        except KafkaError as exc:
            log.warning("%s flush waits for the broker: %r", what, exc)
        failed: list[int] = []
        for i, future in futures:
            try:
                metas[i] = future.get(timeout=1)
            except KafkaError as exc:
                log.warning("%s send waits for the broker: %r", what, exc)
                failed.append(i)
        sent = {i for i, _ in futures}
        if failed or len(futures) < len(todo):
            drop_producer()  # a fresh producer (new producer id) for the retry
        if failed and recheck is not None:
            failed = recheck(failed)
        todo = failed + [i for i in todo if i not in sent]
        if todo and backoff.pause():
            return None
    return metas


def retry_through_outage(call: Callable[[], T], wait: Callable[[float], bool], what: str,
                         backoff: tuple[float, float] = OUTAGE_BACKOFF_S,
                         on_retry: Callable[[KafkaError], None] | None = None) -> T | None:
    """`call()`, waiting out a broker that is away: a retriable KafkaError (timeout, lost
    connection, no coordinator) is logged and retried after `wait(s)`, s doubling from
    backoff[0] to backoff[1]; `wait` returning True gives up (None). Other errors escape.
    """
    pauses = Backoff(wait, backoff)
    while True:
        try:
            return call()
        except KafkaError as exc:
            if not getattr(exc, "retriable", False):
                raise
            if on_retry is not None:
                on_retry(exc)
            log.warning("%s failed (%r); retrying in %.1f s", what, exc, pauses.delay)
        if pauses.pause():
            return None


def poll_through_outage(consumer: Any, timeout_ms: int, max_records: int, wait: Callable[[float], bool],
                        what: str) -> dict[Any, list[Any]] | None:
    """`consumer.poll` through an outage: kafka-python 3 raises retriable errors from poll itself
    (a lost connection while it validates positions or finds the coordinator), and a loop that let
    them escape exited in the middle of an outage (the land worker, code 70). None: gave up."""
    polled: dict[Any, list[Any]] | None = retry_through_outage(
        lambda: consumer.poll(timeout_ms=timeout_ms, max_records=max_records), wait, f"{what} poll")
    return polled
