"""`infra.clients.bootstrapped`: a client whose bootstrap met a hung broker is made again, within a deadline."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from infra.clients import bootstrapped


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_try_waits_at_most_twice_the_request_timeout_and_a_later_try_connects() -> None:
    clock, tries = Clock(), []

    def make(**config: Any) -> str:
        tries.append(config["bootstrap_timeout_ms"])
        if len(tries) < 3:
            clock.now += config["bootstrap_timeout_ms"] / 1000  # the hung broker held the whole try
            raise KafkaTimeoutError("Unable to bootstrap")
        return f"client of {config['bootstrap_servers']}"

    got = bootstrapped(make, {"bootstrap_servers": "a,b,c", "request_timeout_ms": 2500}, clock=clock)
    assert got == "client of a,b,c"
    assert tries == [5000, 5000, 5000]


def test_past_the_deadline_the_error_is_the_caller_s() -> None:
    clock, tries = Clock(), []

    def make(**config: Any) -> str:
        tries.append(1)
        clock.now += config["bootstrap_timeout_ms"] / 1000
        raise KafkaTimeoutError("Unable to bootstrap")

    with pytest.raises(KafkaTimeoutError):
        bootstrapped(make, {"request_timeout_ms": 2500}, deadline_s=12.0, clock=clock)
    assert len(tries) == 2  # a third 5 s try would end past 12 s


def test_other_errors_are_not_retried() -> None:
    def make(**config: Any) -> str:
        raise ValueError("bad config")

    with pytest.raises(ValueError):
        bootstrapped(make, {"request_timeout_ms": 2500})


def test_a_real_client_gives_a_hung_broker_only_its_bounded_try() -> None:
    """kafka-python itself, against a listener that accepts and never answers (a SIGSTOPped broker): each try
    ends at its bound and `bootstrapped` hands the error back at its deadline, not 30 s per try."""
    import socket
    import time

    from kafka import KafkaConsumer

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))  # the OS picks a free port: nothing else listens there
    hung.listen(16)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            bootstrapped(KafkaConsumer, {"bootstrap_servers": f"127.0.0.1:{hung.getsockname()[1]}",
                                         "request_timeout_ms": 600, "fetch_max_wait_ms": 100}, deadline_s=3.0)
        assert time.monotonic() - started < 20  # the library alone would hold the one try 30 s
    finally:
        hung.close()


def test_a_worker_s_group_consumer_gives_a_hung_broker_only_its_bounded_try() -> None:
    """The decode and land consumers (`infra.consumer_group.group_consumer`) are made at a worker's start and
    restart, when a broker may be the reason for it: the same bound as above, not kafka-python's 30 s."""
    import socket
    import time

    from infra.consumer_group import group_consumer

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            group_consumer("t", bootstrap_servers=f"127.0.0.1:{hung.getsockname()[1]}", group_id="g",
                           request_timeout_ms=600, fetch_max_wait_ms=100, bootstrap_deadline_s=3.0)
        assert time.monotonic() - started < 20
    finally:
        hung.close()
