"""Faust's Kafka consumer, giving a hung broker up after the clients' short request timeout.

aiokafka has one request timeout for everything a consumer sends. Faust needs it long
(`broker_request_timeout` >= the 6 s session, and JoinGroup is held by the coordinator until
every member rejoined, up to the rebalance timeout), but the same timeout then holds a fetch,
a metadata request or a new connection's handshake to a broker that stopped answering
(SIGSTOP, a network partition): measured in make chaos-cluster's broker_stop, the detect
worker's input stalled 20 s, and every alert with it.

So the worker consumer's data connections (fetch, metadata, offsets, FindCoordinator and
every handshake) use `data_timeout_s`, and only its connections to the group coordinator
(JoinGroup, SyncGroup, heartbeats, commits: aiokafka's COORDINATION connection group) keep
Faust's long one. Written against aiokafka 0.14 (pinned): `AIOKafkaConsumer._client`, the
client's `_get_conn` / `_request_timeout_ms` and the connection's `_request_timeout`;
tests/streams/test_faust_transport.py checks those are still there and used as assumed.
"""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from aiokafka.client import ConnectionGroup
from faust.transport.drivers import aiokafka as faust_aiokafka

FAUST_FETCH_MAX_WAIT_S = 1.5  # faust.transport.drivers.aiokafka passes fetch_max_wait_ms=1500


def split_request_timeouts(consumer: aiokafka.AIOKafkaConsumer, data_timeout_s: float,
                           coordination_timeout_s: float) -> None:
    """New data connections of `consumer` time requests out after `data_timeout_s`, its
    coordinator connections after `coordination_timeout_s`."""
    client: Any = consumer._client
    client._request_timeout_ms = int(data_timeout_s * 1000)  # create_conn's timeout: data conns, handshakes
    get_conn = client._get_conn

    async def _get_conn(node_id: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
                        no_hint: bool = False) -> Any:
        conn = await get_conn(node_id, group=group, no_hint=no_hint)
        if conn is not None and group == ConnectionGroup.COORDINATION:
            conn._request_timeout = coordination_timeout_s
        return conn

    client._get_conn = _get_conn


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread; its worker consumer gets the split timeouts."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        split_request_timeouts(consumer, self.app.data_request_timeout_s,  # type: ignore[attr-defined]
                               float(self.app.conf.broker_request_timeout))
        return consumer


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


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
