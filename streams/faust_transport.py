"""Faust's Kafka consumer, giving a hung broker up after the clients' short request timeout.

aiokafka has one request timeout for everything a consumer sends. Faust needs it long
(`broker_request_timeout` >= the 6 s session, and JoinGroup is held by the coordinator until
every member rejoined, up to the rebalance timeout), but the same timeout then holds a fetch,
a metadata request or a new connection's handshake to a broker that stopped answering
(SIGSTOP, a network partition): measured in make chaos-cluster's broker_stop, the detect
worker's input stalled 20 s, and every alert with it.

So the worker consumer's data connections (fetch, metadata, offsets, FindCoordinator and
every handshake) use `data_timeout_s`, and on its connections to the group coordinator
(aiokafka's COORDINATION connection group) only the two requests the coordinator holds, JoinGroup
and SyncGroup, keep Faust's long one. Heartbeats and commits get the short one too: with the
long one, a coordinator that stopped answering held the heartbeat routine 20 s, the new
coordinator (the offsets partition's next leader, ~1.2 s later) expired the members' 6 s
sessions, and the rebalance that followed stalled alerts 7.6 s (make chaos-cluster's
broker_stop). Timed out after 2.5 s, a heartbeat marks the coordinator dead, the consumer finds
the new one and heartbeats there within the session. Written against aiokafka 0.14 (pinned):
`AIOKafkaConsumer._client`, the client's `_get_conn` / `_request_timeout_ms` and the
connection's `send` / `_request_timeout`; tests/streams/test_faust_transport.py checks those are
still there and used as assumed.

Second, the poll loop stays in its group while it applies back-pressure. aiokafka leaves the group
when its consumer was not asked for records for `max_poll_interval` (Kafka's max.poll.interval.ms: a
poll loop stuck that long is a livelock), and it does not rejoin until it is asked again. Faust asks
only for its active partitions: when every one is paused because the agent's buffers are full (a
backlog the agent works through slower than it arrives), or none is assigned, its poll loop runs but
never asks. Under the >= 2 M rank-step plan the detect worker left its group after 120 s of full
buffers and, with nothing assigned, never came back: 34,276 records of lag, no progress for 300 s. As
in Kafka's Java consumer, where `poll()` goes on while partitions are paused, a turn of Faust's poll
loop with nothing to ask for counts as a poll (`Consumer._wait_next_records` -> `keep_polling`); a
blocked event loop still stops the turns, and a livelock still leaves the group. Reads aiokafka's
`_subscription._fetch_count` / `_last_fetch_ended` (what `fetcher_idle_time` is computed from).
"""

from __future__ import annotations

import time
from typing import Any

import aiokafka
import faust
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.group import JoinGroupRequest, SyncGroupRequest
from faust.transport.drivers import aiokafka as faust_aiokafka

FAUST_FETCH_MAX_WAIT_S = 1.5  # faust.transport.drivers.aiokafka passes fetch_max_wait_ms=1500
# the requests a coordinator holds until the group settles (up to the rebalance timeout)
HELD_BY_COORDINATOR = (JoinGroupRequest, SyncGroupRequest)


def time_by_request(conn: Any, data_timeout_s: float, held_timeout_s: float) -> None:
    """`conn` times JoinGroup and SyncGroup out after `held_timeout_s`, every other request after
    `data_timeout_s` (aiokafka reads `_request_timeout` when `send` is called)."""
    if getattr(conn, "_steplens_timed_by_request", False):
        return
    send = conn.send

    def send_timed(request: Any, expect_response: bool = True) -> Any:
        conn._request_timeout = held_timeout_s if isinstance(request, HELD_BY_COORDINATOR) else data_timeout_s
        return send(request, expect_response=expect_response)

    conn.send = send_timed
    conn._steplens_timed_by_request = True


def split_request_timeouts(consumer: aiokafka.AIOKafkaConsumer, data_timeout_s: float,
                           coordination_timeout_s: float) -> None:
    """New data connections of `consumer` time requests out after `data_timeout_s`; on its
    coordinator connections JoinGroup and SyncGroup after `coordination_timeout_s`, the rest after
    `data_timeout_s`."""
    client: Any = consumer._client
    client._request_timeout_ms = int(data_timeout_s * 1000)  # create_conn's timeout: data conns, handshakes
    get_conn = client._get_conn

    async def _get_conn(node_id: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
                        no_hint: bool = False) -> Any:
        conn = await get_conn(node_id, group=group, no_hint=no_hint)
        if conn is not None and group == ConnectionGroup.COORDINATION:
            time_by_request(conn, data_timeout_s, coordination_timeout_s)
        return conn

    client._get_conn = _get_conn


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread; its worker consumer gets the split timeouts."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        split_request_timeouts(consumer, self.app.data_request_timeout_s,  # type: ignore[attr-defined]
                               float(self.app.conf.broker_request_timeout))
        return consumer


def keep_polling(consumer: aiokafka.AIOKafkaConsumer | None) -> None:
    """Count a turn of the poll loop that had no partition to ask for as a poll: aiokafka's idle clock
    restarts unless a fetch is under way (then it reads 0 anyway). One attribute store, safe from the
    thread that runs Faust's loop."""
    if consumer is None:
        return
    subscription: Any = consumer._subscription
    if subscription._fetch_count == 0:
        subscription._last_fetch_ended = time.monotonic()


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _wait_next_records(self, timeout: float) -> Any:
        if self.flow_active and not self._get_active_partitions():  # all paused, or none assigned
            keep_polling(getattr(self._thread, "_consumer", None))
        return await super()._wait_next_records(timeout)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


class App(faust.App):
    """A faust.App whose Kafka transport is the one above; `data_request_timeout_s` is the clients'
    `kafka_request_timeout_s` (infra.settings)."""

    def __init__(self, *args: Any, data_request_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a fetch is held by the broker up to Faust's fetch_max_wait_ms (1.5 s) when there is nothing to read
        self.data_request_timeout_s = max(data_request_timeout_s, FAUST_FETCH_MAX_WAIT_S + 1.0)

    def _new_transport(self) -> Transport:
        return Transport(self.conf.broker_consumer, self)
