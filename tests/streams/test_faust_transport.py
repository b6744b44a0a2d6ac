"""Faust's consumer gives a hung broker up after the short data timeout, its coordinator requests keep
the long one (streams/faust_transport.py); and aiokafka still has the internals that relies on."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any

import aiokafka
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection, create_conn
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from infra.settings import Settings
from streams.app import base_app
from streams.faust_transport import ConsumerThread, Transport, keep_polling, split_request_timeouts


class _Conn:
    """aiokafka's connection as the split sees it: `send` reads `_request_timeout` when called."""

    def __init__(self, timeout_s: float) -> None:
        self._request_timeout = timeout_s
        self.timeouts: list[tuple[str, float]] = []

    def send(self, request: Any, expect_response: bool = True) -> float:
        self.timeouts.append((type(request).__name__, self._request_timeout))
        return self._request_timeout


def test_data_connections_get_the_short_timeout_coordinator_connections_the_long_one() -> None:
    async def run() -> tuple[int, float, float]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=20_000)
        client: Any = consumer._client
        made: dict[Any, _Conn] = {}

        async def get_conn(node_id: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
                           no_hint: bool = False) -> _Conn:  # the library's: a conn made with the client's timeout
            return made.setdefault((node_id, group), _Conn(client._request_timeout_ms / 1000))

        client._get_conn = get_conn
        split_request_timeouts(consumer, 2.5, 20.0)
        data = await client._get_conn(1)
        coordination = await client._get_conn(1, group=ConnectionGroup.COORDINATION)
        coordination.send(JoinGroupRequest("g", 6000, 20000, "", "", "consumer", [("faust", b"")]))
        await consumer.stop()  # an unclosed consumer's __del__ logs from inside whatever runs at the next GC
        return client._request_timeout_ms, data._request_timeout, coordination.timeouts[0][1]

    assert asyncio.run(run()) == (2500, 2.5, 20.0)


def test_only_join_and_sync_wait_long_on_the_coordinator_connection() -> None:
    """A heartbeat or a commit to a coordinator that stopped answering waited Faust's 20 s: the
    members' sessions expired at the new coordinator and the rebalance stalled alerts 7.6 s
    (make chaos-cluster's broker_stop). Only the requests the coordinator holds wait long."""
    async def run() -> list[tuple[str, float]]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=20_000)
        client: Any = consumer._client
        conn = _Conn(client._request_timeout_ms / 1000)

        async def get_conn(node_id: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
                           no_hint: bool = False) -> _Conn:
            return conn

        client._get_conn = get_conn
        split_request_timeouts(consumer, 2.5, 20.0)
        coordination = await client._get_conn(3, group=ConnectionGroup.COORDINATION)
        await client._get_conn(3, group=ConnectionGroup.COORDINATION)  # wrapped once, however often it is got
        coordination.send(HeartbeatRequest("g", 4, "m"))
        coordination.send(JoinGroupRequest("g", 6000, 20000, "m", "", "consumer", [("faust", b"")]))
        coordination.send(OffsetCommitRequest("g", 4, "m", -1, [("t", [(0, 10, "")])]))
        coordination.send(SyncGroupRequest("g", 4, "m", "", [("m", b"")]))
        coordination.send(LeaveGroupRequest("g", "m"))
        await consumer.stop()
        return conn.timeouts

    assert asyncio.run(run()) == [("HeartbeatRequest", 2.5), ("JoinGroupRequest", 20.0),
                                  ("OffsetCommitRequest", 2.5), ("SyncGroupRequest", 20.0),
                                  ("LeaveGroupRequest", 2.5)]


def test_aiokafka_still_has_what_the_split_relies_on() -> None:
    """A newer aiokafka that renamed these would silently bring the 20 s stall back."""
    assert "request_timeout_ms" in inspect.signature(create_conn).parameters
    assert list(inspect.signature(AIOKafkaClient._get_conn).parameters) == ["self", "node_id", "group", "no_hint"]
    assert "self._request_timeout_ms" in inspect.getsource(AIOKafkaClient._get_conn)
    assert "wait_for(fut, self._request_timeout)" in inspect.getsource(AIOKafkaConnection.send)
    assert list(inspect.signature(AIOKafkaConnection.send).parameters) == ["self", "request", "expect_response"]
    assert "group=ConnectionGroup.COORDINATION" in inspect.getsource(
        aiokafka.consumer.group_coordinator.GroupCoordinator._send_req)

    async def client_of() -> Any:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        await consumer.stop()
        return consumer._client

    assert isinstance(asyncio.run(client_of()), AIOKafkaClient)


def test_every_worker_app_uses_the_transport(tmp_path: Path) -> None:
    app = base_app(Settings(home=tmp_path, kafka_security="plaintext", kafka_request_timeout_s=0.5), "detect")
    assert isinstance(app.transport, Transport)
    assert app.data_request_timeout_s == 2.5  # never below Faust's 1.5 s fetch wait + 1 s
    assert isinstance(app.consumer._thread, ConsumerThread)


def test_a_poll_loop_with_every_partition_paused_or_none_assigned_still_counts_as_polling(tmp_path: Path) -> None:
    """The >= 2 M plan's detect worker left its group after 120 s of full buffers (Faust asked aiokafka for
    nothing while every partition was paused), and aiokafka never rejoined because nothing asked after: 300 s
    without progress. A turn of Faust's poll loop with nothing to ask for restarts aiokafka's idle clock."""
    app = base_app(Settings(home=tmp_path, kafka_security="plaintext"), "detect")
    faust_consumer: Any = app.consumer

    async def run() -> tuple[float, float, float]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        subscription: Any = consumer._subscription
        subscription._last_fetch_ended = time.monotonic() - 200  # 200 s since the last ask
        idle_before = subscription.fetcher_idle_time
        faust_consumer._thread._consumer = consumer
        faust_consumer._active_partitions = set()  # all paused, or none assigned
        faust_consumer.flow_active = True
        faust_consumer.sleep = _no_sleep  # the turn's 1 s pause
        await faust_consumer._wait_next_records(0.01)
        idle_after = subscription.fetcher_idle_time
        long_ago = subscription._last_fetch_ended = time.monotonic() - 200
        with subscription.fetch_context():  # a fetch under way: its end restarts the clock, not keep_polling
            keep_polling(consumer)
            untouched = subscription._last_fetch_ended == long_ago
        faust_consumer._thread._consumer = None
        await consumer.stop()
        return idle_before, idle_after, untouched

    before, after, untouched = asyncio.run(run())
    assert before >= 200 and after < 5 and untouched


async def _no_sleep(seconds: float) -> None:
    return None


def test_aiokafka_still_leaves_and_stays_out_by_the_idle_clock_that_keep_polling_restarts() -> None:
    coordinator = aiokafka.consumer.group_coordinator.GroupCoordinator
    assert "idle_time >= self._max_poll_interval" in inspect.getsource(coordinator.ensure_active_group)
    assert "self._maybe_leave_group()" in inspect.getsource(coordinator._heartbeat_routine)
    state = inspect.getsource(aiokafka.consumer.subscription_state.SubscriptionState.fetcher_idle_time.fget)
    assert "self._fetch_count == 0" in state and "self._last_fetch_ended" in state
