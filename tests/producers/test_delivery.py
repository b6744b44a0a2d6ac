"""producers/delivery.py: the emitter's decisions as data, driven by hand with a fake clock (no threads, no Kafka).

test_emitter.py covers the same logic through the worker thread and a real spool; these pin each
decision on its own, at exact times, where a thread-driven test can only wait for the outcome.
"""

from __future__ import annotations

import pytest

from producers.delivery import (
    CLOSED,
    EXPORT_FAILED,
    OVERFLOW_POLL_S,
    QUEUE_FULL,
    SPOOL_FULL,
    Decision,
    Delivery,
    held_failure,
    per_event,
    spool_loss_reason,
)
from producers.exporter import ExportError, OutRecord


def recs(n: int, start: int = 0) -> list[OutRecord]:
    return [OutRecord("t.steps", b"k", bytes([i])) for i in range(start, start + n)]


def delivery(*, max_queue: int = 100, batch_size: int = 4, has_spool: bool = False, stall_s: float = 2.0) -> Delivery:
    """Flush interval 0.2 s, backoff 0.5 s doubling up to 2 s."""
    return Delivery(max_queue=max_queue, batch_size=batch_size, flush_interval_s=0.2, retry_backoff_s=0.5,
                    retry_backoff_max_s=2.0, stall_s=stall_s, has_spool=has_spool)


def test_the_queue_is_bounded_and_every_refusal_is_counted() -> None:
    d = delivery(max_queue=3)
    assert [d.enqueue(r, 0.0) for r in recs(5)] == [True, True, True, False, False]
    d.refuse("encode_error")
    d.begin_close(abort_at=9.0)
    assert d.enqueue(recs(1)[0], 1.0) is False
    s = d.stats()
    assert s.dropped == {QUEUE_FULL: 2, "encode_error": 1, CLOSED: 1} and s.queued == 3
    assert s.emitted == s.exported + s.dropped_total + s.pending == 7


def test_a_partial_batch_waits_the_flush_interval_a_full_one_or_a_flush_goes_at_once() -> None:
    d = delivery()
    d.enqueue(recs(1)[0], 10.0)
    assert d.decide(10.1) == Decision(None, pytest.approx(10.2))
    assert d.decide(10.2).action == "export"
    d.request_flush()
    assert d.decide(10.0).action == "export"  # a flush makes the partial batch due now
    d.end_flush()
    d.enqueue_all(recs(3, 1), 10.0, send_now=False)
    assert d.decide(10.0).action == "export"  # a full batch does not wait
    batch, _ = d.pop_batch(10.05)
    assert batch == recs(4) and d.in_flight == 4 and not d.queue
    assert d.decide(10.05) == Decision(None, pytest.approx(10.05 + 3600.0))  # nothing queued: sleep long


def test_failures_back_off_doubling_up_to_the_cap_and_success_resets() -> None:
    d = delivery()
    assert d.on_failure(delivered=1, now=100.0) is True  # it was healthy: the one warning
    assert d.retry_at == 100.5
    assert d.on_failure(delivered=0, now=101.0) is False
    assert d.retry_at == 102.0
    d.on_failure(delivered=0, now=103.0)
    d.on_failure(delivered=0, now=104.0)
    assert d.retry_at == 106.0  # capped at retry_backoff_max_s
    s = d.stats()
    assert s.exported == 1 and s.export_failures == 4 and not s.healthy
    # without a spool the queue waits for the retry, even with a full batch due
    d.enqueue_all(recs(4), 104.0, send_now=True)
    assert d.decide(105.0) == Decision(None, 106.0)
    assert d.decide(106.0).action == "export"
    assert d.on_success() is True and d.retry_at == 0.0 and d.backoff.delay == 0.5
    assert d.on_success() is False


def test_with_a_spool_fresh_records_go_behind_it_until_it_is_replayed() -> None:
    d = delivery(has_spool=True)
    d.enqueue_all(recs(4), 0.0, send_now=False)
    assert d.decide(0.0).action == "export"  # healthy and nothing spooled: straight to the exporter
    d.on_failure(delivered=0, now=0.0)  # down: the next due batch goes to the spool
    assert d.spooling() and d.decide(0.1).action == "spool"
    d.pop_batch(0.1)
    d.sync_spool(pending=4, nbytes=400)
    assert d.decide(0.2) == Decision(None, 0.5)  # replay waits for the backoff
    assert d.decide(0.5).action == "replay" and d.replay_due(0.5)
    d.on_success()
    d.enqueue(recs(1, 9)[0], 0.6)
    assert d.spooling(), "healthy, but older records still wait in the spool: newer ones queue behind them"


def test_while_an_export_hangs_the_queue_spills_at_high_water_or_once_stalled() -> None:
    d = delivery(max_queue=10, batch_size=2, has_spool=True, stall_s=2.0)
    assert d.high_water == 5
    d.enqueue_all(recs(2), 0.0, send_now=False)
    assert not d.overflowing()
    assert not d.stall_due(now=1.0, started=0.0)  # a batch is due, but the export is not stalled yet
    assert d.stall_due(now=2.0, started=0.0)
    assert d.export_wait(now=1.0, started=0.0, aborted=False) == pytest.approx(1.0)  # wakes at the stall
    d.enqueue_all(recs(3, 2), 0.0, send_now=False)
    assert d.overflowing()
    d.begin_close(abort_at=4.0)
    assert not d.overflowing() and not d.stall_due(now=3.0, started=0.0)  # closing: the abort decides
    assert not d.abort_due(3.9, aborted=False) and d.abort_due(4.0, aborted=False)
    assert not d.abort_due(5.0, aborted=True)
    assert d.export_wait(now=3.5, started=0.0, aborted=False) == pytest.approx(0.5)
    assert d.export_wait(now=3.5, started=0.0, aborted=True) == pytest.approx(OVERFLOW_POLL_S)


def test_records_settle_in_queue_order() -> None:
    """A later run settled first (spooled while an earlier export hangs) does not settle the earlier one."""
    d = delivery(has_spool=True)
    n, seq, wake = d.accept_prefix(recs(4), 0.0, send_now=False)
    assert (n, seq, wake) == (4, 4, True)
    _, first = d.pop_batch(0.0)  # the export in flight
    d.accept_prefix(recs(3, 4), 0.0, send_now=False)
    rest, second, keep = d.drain_queue(keep_in_flight=True)
    assert len(rest) == 3 and keep == 4 and d.in_flight == 7
    d.settle(second)
    assert d.settled() == 0
    d.settle(first)
    assert d.settled() == 7


def test_accept_prefix_takes_what_fits_and_counts_no_drop() -> None:
    d = delivery(max_queue=5)
    assert d.accept_prefix(recs(8), 0.0, send_now=False) == (5, 5, True)  # the rest stays with the sender
    assert d.accept_prefix(recs(2), 0.0, send_now=True) == (0, 5, False)  # full: none, and no wake-up
    s = d.stats()
    assert s.emitted == 5 and s.dropped == {} and s.queued == 5


def test_a_failed_held_export_releases_only_a_delivered_prefix() -> None:
    batch = recs(6)
    # the first two were delivered, the rest failed; three were held at the spool's head
    plan = held_failure(batch, batch[2:], held=3)
    assert (plan.release, plan.delivered, plan.spooled, plan.rest) == (2, 2, 1, batch[3:])
    # failures that are no suffix: nothing can be released, the held ones are sent again
    plan = held_failure(batch, [batch[1], batch[4]], held=3)
    assert (plan.release, plan.delivered, plan.spooled, plan.rest) == (0, 2, 3, [batch[4]])


def test_what_the_spool_refuses_is_dropped_with_its_reason() -> None:
    batch = recs(3)
    first = len(batch[0].value) + len(batch[0].topic) + 64
    assert spool_loss_reason(batch, stored=0, bytes_before=0, max_bytes=first) == EXPORT_FAILED  # the write failed
    assert spool_loss_reason(batch, stored=0, bytes_before=1, max_bytes=first) == SPOOL_FULL
    assert spool_loss_reason(batch, stored=1, bytes_before=0, max_bytes=10_000) == SPOOL_FULL
    d = delivery(has_spool=True)
    d.in_flight = 3
    d.spool_appended(batch, stored=1, bytes_before=0, max_bytes=10_000, in_flight_after=0)
    assert d.stats().dropped == {SPOOL_FULL: 2} and d.spooled == 1 and d.in_flight == 0


def test_a_failed_packed_record_fails_its_member_events() -> None:
    events = recs(4)
    packed_a, packed_b = OutRecord("t.steps", b"a", b"[..]"), OutRecord("t.steps", b"b", b"[..]")
    members = {id(packed_a): tuple(events[:2]), id(packed_b): tuple(events[2:])}
    failure = per_event(ExportError("b timed out", failed=[packed_b]), members)
    assert isinstance(failure, ExportError) and failure.failed == tuple(events[2:])
    foreign = per_event(ExportError("copied", failed=[OutRecord("t.steps", b"b", b"[..]")]), members)
    assert isinstance(foreign, ExportError) and foreign.failed is None  # not ours: the whole batch failed
