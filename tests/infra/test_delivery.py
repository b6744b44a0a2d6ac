"""deliver_all and poll_through_outage (infra/delivery.py) with stand-in clients: pure unit tests of
the retry rules (the real broker paths are covered by tests/streams/detect/state/test_outbox.py, the restart
tests and tests/streams/land/test_outage.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError

from infra.backoff import Backoff
from infra.delivery import deliver_all, poll_through_outage


class _Future:
    def __init__(self, value: Any, fail: bool) -> None:
        self.value, self.fail = value, fail

    def get(self, timeout: float) -> Any:
        if self.fail:
            raise KafkaTimeoutError("expired")
        return self.value


class _Producer:
    """Fails the sends whose value is in `fail_once` the first time they are sent."""

    def __init__(self, fail_once: set[bytes], log: list[bytes]) -> None:
        self.fail_once, self.log = fail_once, log

    def send(self, topic: str, key: bytes, value: bytes, headers: Any) -> _Future:
        self.log.append(value)
        fail = value in self.fail_once
        self.fail_once.discard(value)
        return _Future((topic, value), fail)

    def flush(self, timeout: float) -> None:
        return None


def _records(n: int) -> list[tuple[str, bytes, bytes, None]]:
    return [("t", b"k", str(i).encode(), None) for i in range(n)]


def test_failed_sends_go_again_on_a_fresh_producer_and_metadata_stays_in_order() -> None:
    sent: list[bytes] = []
    fail = {b"1"}
    made: list[_Producer] = []

    def producer() -> _Producer:
        if not made:
            made.append(_Producer(fail, sent))
        return made[-1]

    metas = deliver_all(_records(3), producer, made.clear, lambda s: False, "test")
    assert metas == [("t", b"0"), ("t", b"1"), ("t", b"2")]
    assert sent == [b"0", b"1", b"2", b"1"]


def test_recheck_drops_failed_sends_already_on_the_broker() -> None:
    sent: list[bytes] = []
    p = _Producer({b"0", b"2"}, sent)
    metas = deliver_all(_records(3), lambda: p, lambda: None, lambda s: False, "test",
                        recheck=lambda failed: [i for i in failed if i != 0])
    assert sent == [b"0", b"1", b"2", b"2"]
    assert metas == [None, ("t", b"1"), ("t", b"2")]


def test_giving_up_while_waiting_returns_none() -> None:
    p = _Producer({b"0"}, [])
    assert deliver_all(_records(1), lambda: p, lambda: None, lambda s: True, "test") is None


class _Consumer:
    """poll raises each of `errors` in turn, then returns one batch."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.polls = 0

    def poll(self, timeout_ms: int, max_records: int) -> dict[str, list[int]]:
        self.polls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"tp": [1, 2]}


def test_a_poll_failing_while_the_broker_is_away_is_retried_with_backoff() -> None:
    waits: list[float] = []
    consumer = _Consumer([KafkaConnectionError("111 ECONNREFUSED"), KafkaTimeoutError(), KafkaConnectionError()])
    got = poll_through_outage(consumer, 100, 10, lambda s: bool(waits.append(s)), "test")
    assert got == {"tp": [1, 2]} and consumer.polls == 4
    assert waits == [0.5, 1.0, 2.0]  # doubling from 0.5 s


def test_a_non_retriable_poll_error_escapes_and_giving_up_returns_none() -> None:
    with pytest.raises(UnsupportedVersionError):
        poll_through_outage(_Consumer([UnsupportedVersionError()]), 100, 10, lambda s: False, "test")
    assert poll_through_outage(_Consumer([KafkaConnectionError()]), 100, 10, lambda s: True, "test") is None


def test_backoff_doubles_up_to_its_longest_pause_and_gives_up_when_told() -> None:
    waits: list[float] = []
    backoff = Backoff(lambda s: bool(waits.append(s)) or len(waits) >= 6, (0.5, 3.0))
    assert [backoff.pause() for _ in range(6)] == [False] * 5 + [True]
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_a_scheduled_backoff_doubles_without_waiting_and_starts_over_after_a_success() -> None:
    backoff = Backoff(backoff=(0.5, 3.0))
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5
