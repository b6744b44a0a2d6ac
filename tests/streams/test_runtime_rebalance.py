"""A rebalance while a consumer-runtime batch is being gathered, against the real broker: every record is
handled once (streams/runtime.py, `MovedPartitions`).

Member A gathers every record of a 4-partition topic into one batch (a land-like batch due only after
`GATHER_S`); member B then joins the group. The rebalance moves two of A's partitions to B inside A's
next poll; B reads them from the committed offsets, nothing being committed yet, while the two A keeps
keep their positions. Before the runtime dropped a moved partition's records from the batch in hand, A
handled its copy as well: 600 records handled for 400 (the restart test's `decoded_twice`, seen after
partitions were added to the detect worker's input).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from bench.chaos import poll_until
from infra.clients import kafka_client_config
from infra.consumer_group import group_consumer
from infra.settings import Settings
from streams.app import WorkerTimeouts
from streams.runtime import Batch, Batching, Commits, Consumer, ConsumerLoop

pytestmark = pytest.mark.kafka

PARTITIONS = 4
PER_PARTITION = 100
GATHER_S = 12.0  # A's batch is due this long after its first record: well after B's join has rebalanced A


class Recording(ConsumerLoop):
    """A stage whose sink is a list: every (partition, offset) it handled, in order."""

    def __init__(self, settings: Settings, topic: str, within_s: float) -> None:
        super().__init__("test", Batching(100_000, within_s, accumulate=True),
                         Commits(through_outage=False, timeout_ms=10_000), gc_threshold=0)
        self.settings, self.topic = settings, topic
        self.handled: list[tuple[int, int]] = []
        self.polled = 0
        self.lock = threading.Lock()

    def open_consumer(self) -> Consumer:
        consumer: Consumer = group_consumer(
            self.topic, **kafka_client_config(self.settings, "admin"), group_id=self.topic, listener=self.revocations,
            enable_auto_commit=False, auto_offset_reset="earliest", **WorkerTimeouts().kafka_python_consumer())
        return consumer

    def on_polled(self, consumer: Consumer, polled: dict[Any, list[Any]], first: bool) -> None:
        self.polled += sum(len(records) for records in polled.values())

    def handle(self, consumer: Consumer, batch: Batch) -> bool:
        with self.lock:
            self.handled.extend((r.partition, r.offset) for r in batch.records)
        return True


def test_a_rebalance_while_a_batch_is_gathered_leaves_its_records_to_their_next_owner_handled_once(
        kafka_settings: Settings, unique_name: str) -> None:
    admin = KafkaAdminClient(**kafka_client_config(kafka_settings, "admin"))
    admin.create_topics([NewTopic(unique_name, PARTITIONS, 1)])
    producer = KafkaProducer(**kafka_client_config(kafka_settings, "admin"), acks="all")
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.send(unique_name, value=b"%d" % i, partition=p)
    producer.flush()
    producer.close()
    admin.close()
    total = PARTITIONS * PER_PARTITION

    a = Recording(kafka_settings, unique_name, GATHER_S)
    b = Recording(kafka_settings, unique_name, 0.2)
    try:
        a.start()
        assert poll_until(lambda: a.polled >= total, 60, every=0.1), f"A polled {a.polled} of {total}"
        assert not a.handled, "A's batch was due before the second member joined: raise GATHER_S"
        b.start()
        assert poll_until(lambda: a.batches >= 1 and len(set(a.handled) | set(b.handled)) == total, 90,
                                 every=0.1), \
            (len(a.handled), len(b.handled), a.polled, a.moved_records, a.batches)
    finally:
        a.stop()
        b.stop()
    assert a.failed is None and b.failed is None, (a.failed, b.failed)
    handled = a.handled + b.handled
    assert len(handled) == len(set(handled)) == total, \
        f"{len(handled) - len(set(handled))} records handled twice (A {len(a.handled)}, B {len(b.handled)})"
    assert b.handled, "the rebalance gave B nothing"
    assert a.moved_records == len(b.handled)  # what moved to B left A's batch; what A kept, A handled
