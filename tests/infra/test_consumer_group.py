"""Rebalances that always finish (infra/consumer_group.py), against the real broker.

Two members of one group poll with the decode stage's short timeout while partitions are added
to their topic: the leader rejoins on the metadata change, its JoinGroup waits for the other
member (about a heartbeat interval), longer than one poll. With kafka-python 3.0.12's plain
KafkaConsumer a member then stays REBALANCING for good, its commits refused (the same loop
without the guard got stuck in 4 of 6 runs; `test_plain_consumer_can_stay_rebalancing` shows
the hole is still in the pinned version, so the guard is still needed). With `group_consumer`
both members settle on a split of all the partitions after each of five additions, and commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import KafkaError

from infra.clients import kafka_client_config
from infra.consumer_group import after_failed_commit, group_consumer, heal
from infra.settings import Settings
from streams.app import WorkerTimeouts

pytestmark = pytest.mark.kafka

POLL_MS = 200  # the decode stage's poll timeout (DetectionConfig.batch_within_s)
SETTLE_S = 40.0
GROWTH = (4, 6, 8, 10, 12)  # five metadata changes, each a chance for a plain member to get stuck
WORK_S = 0.05  # what a batch costs between two polls (decode + deliver): the window the join completes in


@dataclass
class Member:
    """One group member's loop: poll, commit; what it owns and when it last committed."""

    consumer: Any
    healing: bool = True  # False: the loop as it was, without heal / after_failed_commit
    commits: int = 0
    refused: int = 0
    last_commit: float = 0.0
    owned: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(timeout_ms=POLL_MS)
                if self.healing:
                    heal(self.consumer)
                try:
                    self.consumer.commit(timeout_ms=5000)
                    self.commits += 1
                    self.last_commit = time.monotonic()
                except KafkaError as exc:
                    self.refused += 1
                    if self.healing:
                        after_failed_commit(self.consumer, exc)
                self.owned = {tp.partition for tp in self.consumer.assignment()}
                self.stop.wait(WORK_S)
        finally:
            self.consumer.close()


def _two_members_through_a_partition_change(kafka_settings: Settings, name: str, factory: Callable[..., Any],
                                            healing: bool = True) -> tuple[list[Member], bool]:
    admin = KafkaAdminClient(**kafka_client_config(kafka_settings, "admin"))
    admin.create_topics([NewTopic(name, 2, 1)])
    config = {**kafka_client_config(kafka_settings, "admin"), "group_id": name, "enable_auto_commit": False,
              "auto_offset_reset": "earliest", **WorkerTimeouts().kafka_python_consumer(),
              "metadata_max_age_ms": 500}
    members = [Member(factory(name, **config), healing) for _ in range(2)]
    threads = [threading.Thread(target=m.run, daemon=True) for m in members]
    for t in threads:
        t.start()

    def settled(partitions: int) -> bool:
        owned = [m.owned for m in members]
        now = time.monotonic()
        return (all(owned) and set().union(*owned) == set(range(partitions)) and not owned[0] & owned[1]
                and all(now - m.last_commit < 1.0 for m in members))

    try:
        assert _eventually(lambda: settled(2), SETTLE_S), "the group never settled on 2 partitions"
        ok = True
        for partitions in GROWTH:
            admin.create_partitions({name: NewPartitions(partitions)})
            ok = ok and _eventually(lambda n=partitions: settled(n), SETTLE_S)  # type: ignore[misc]
    finally:
        for m in members:
            m.stop.set()
        for t in threads:
            t.join(30)
        admin.close()
    return members, ok


def _eventually(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_group_consumers_rejoin_and_commit_after_partitions_are_added(kafka_settings: Settings,
                                                                       unique_name: str) -> None:
    members, ok = _two_members_through_a_partition_change(kafka_settings, unique_name, group_consumer)
    assert ok, [(m.owned, m.commits, m.refused) for m in members]
    assert all(not m.consumer._coordinator.rebalance_in_progress() for m in members)


def test_group_consumer_needs_a_group() -> None:
    with pytest.raises(ValueError, match="group_id"):
        group_consumer("t", bootstrap_servers="127.0.0.1:1")


class _Coordinator:
    """A stand-in for kafka-python's coordinator: only the state `heal` reads."""

    group_id = "g"

    def __init__(self, rebalancing: bool, rejoin: bool, join_done: bool | None) -> None:
        self.rebalancing, self.rejoin_needed = rebalancing, rejoin
        self._join_task = None if join_done is None else type("T", (), {"is_done": join_done})()

    def rebalance_in_progress(self) -> bool:
        return self.rebalancing

    def need_rejoin(self) -> bool:
        return self.rejoin_needed

    def request_rejoin(self) -> None:
        self.rejoin_needed = True


@pytest.mark.parametrize(("rebalancing", "rejoin", "join_done", "healed"), [
    (True, False, True, True),     # the stuck state: a finished join nobody awaited
    (True, False, None, True),
    (True, False, False, False),   # a join in flight: the next poll awaits it
    (True, True, True, False),     # a rejoin already wanted
    (False, False, None, False),   # stable
])
def test_heal_requests_a_rejoin_only_when_nothing_would_finish_the_rebalance(
        rebalancing: bool, rejoin: bool, join_done: bool | None, healed: bool) -> None:
    consumer = type("C", (), {})()
    consumer._coordinator = _Coordinator(rebalancing, rejoin, join_done)
    assert heal(consumer) is healed
    assert consumer._coordinator.rejoin_needed is (rejoin or healed)


def test_plain_consumer_can_stay_rebalancing(kafka_settings: Settings, unique_name: str) -> None:
    """The hole the guard closes, still in the pinned kafka-python: a plain consumer polled briefly
    once after the metadata change is left REBALANCING with commits refused. If a kafka-python
    upgrade makes this fail, the guard may be dropped."""
    admin = KafkaAdminClient(**kafka_client_config(kafka_settings, "admin"))
    admin.create_topics([NewTopic(unique_name, 2, 1)])
    consumer = KafkaConsumer(**kafka_client_config(kafka_settings, "admin"), group_id=unique_name,
                             enable_auto_commit=False, metadata_max_age_ms=500,
                             **{k: v for k, v in WorkerTimeouts().kafka_python_consumer().items()
                                if k != "metadata_max_age_ms"})
    try:
        # Join only once the new topic's partitions are known: a first join before that assigns
        # nothing ("No partition metadata"), and the rejoin when they appear can itself get stuck,
        # which is the hole shown below, but not yet the step this test takes.
        assert _eventually(lambda: consumer.partitions_for_topic(unique_name) == {0, 1}, SETTLE_S)
        consumer.subscribe([unique_name])
        assert _eventually(lambda: bool(consumer.poll(timeout_ms=POLL_MS) or True) and bool(consumer.assignment()),
                           SETTLE_S)
        admin.create_partitions({unique_name: NewPartitions(4)})
        stuck = _eventually(lambda: bool(consumer.poll(timeout_ms=1) or True)
                            and consumer._coordinator.rebalance_in_progress()
                            and not consumer._coordinator.need_rejoin(), SETTLE_S)
        assert stuck
        with pytest.raises(KafkaError):
            consumer.commit(timeout_ms=2000)
    finally:
        consumer.close()
        admin.close()
