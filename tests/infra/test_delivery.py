"""deliver_all (infra/delivery.py) with a stand-in producer: a pure unit test of the retry rules
(the real broker paths are covered by tests/streams/test_outbox.py and the restart tests)."""

from __future__ import annotations

from typing import Any

from kafka.errors import KafkaTimeoutError

from infra.delivery import deliver_all


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
