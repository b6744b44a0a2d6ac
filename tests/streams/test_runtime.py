"""The consumer runtime's batching, commit order and commit policies, and its read to a topic's end, with
in-memory consumers (pure unit tests)."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaTimeoutError

from streams.runtime import MAX_POLL_MS, Batch, Batching, Commits, Consumer, ConsumerLoop, read_to_end


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class ScriptedConsumer:
    """Returns the scripted polls in order (None: an empty poll), then stops the loop; records what the runtime
    asked: each poll's timeout and room, and each commit with the offsets handled by then."""

    def __init__(self, loop: ConsumerLoop, polls: list[list[int] | None], commit_errors: list[Exception]) -> None:
        self.loop = loop
        self.polls = polls
        self.commit_errors = commit_errors
        self.timeouts: list[int] = []
        self.rooms: list[int | None] = []
        self.commits: list[list[int]] = []
        self.closed = False

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Any]]:
        self.timeouts.append(timeout_ms)
        self.rooms.append(max_records)
        if not self.polls:
            self.loop.stopping.set()
            return {}
        offsets = self.polls.pop(0)
        return {} if offsets is None else {"tp": [Rec("t", 0, o, None, b"") for o in offsets]}

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        if self.commit_errors:
            raise self.commit_errors.pop(0)
        assert isinstance(self.loop, Stage)
        self.commits.append(list(self.loop.handled))

    def close(self) -> None:
        self.closed = True


class Stage(ConsumerLoop):
    def __init__(self, batching: Batching, polls: list[list[int] | None], *, through_outage: bool = False,
                 commit_errors: list[Exception] | None = None, sink_ok: bool = True) -> None:
        super().__init__("test", batching, Commits(through_outage=through_outage, timeout_ms=1000,
                                                   backoff_s=(0.001, 0.002)), gc_threshold=0)
        self.consumer = ScriptedConsumer(self, polls, commit_errors or [])
        self.handled: list[int] = []
        self.batch_sizes: list[int] = []
        self.sink_ok = sink_ok
        self.after: list[bool] = []

    def open_consumer(self) -> Consumer:
        return self.consumer

    def handle(self, consumer: Consumer, batch: Batch) -> bool:
        if not self.sink_ok:
            return False
        self.batch_sizes.append(len(batch))
        self.handled.extend(r.offset for r in batch.records)
        return True

    def after_batch(self, committed: bool) -> None:
        self.after.append(committed)


def test_each_poll_is_a_batch_committed_after_its_sink_and_an_idle_poll_waits_longer() -> None:
    stage = Stage(Batching(max_records=100, within_s=0.05, accumulate=False, idle_poll_ms=1000),
                  [[0, 1], None, [2]])
    stage.run()
    assert stage.failed is None
    assert stage.batch_sizes == [2, 1]
    assert stage.consumer.commits == [[0, 1], [0, 1, 2]]
    assert stage.consumer.timeouts[:4] == [50, 50, 1000, 50]  # busy, busy, idle after the empty poll, busy
    assert stage.consumer.closed


def test_accumulated_polls_make_one_batch_of_max_records() -> None:
    stage = Stage(Batching(max_records=4, within_s=60.0, accumulate=True), [[0, 1], [2, 3], [4]])
    stage.run()
    assert stage.batch_sizes == [4]  # [4] is still waiting for its batch when the loop stops: never committed
    assert stage.consumer.commits == [[0, 1, 2, 3]]
    assert stage.consumer.rooms[:3] == [4, 2, 4]  # a poll asks only for what the batch has room for


def test_no_poll_waits_longer_than_a_stop_may_wait() -> None:
    """A landing batch waits `sink_batch_seconds` (5 s) for records; one poll that long held every SIGTERM of
    the land worker ~4 s (kafka-python's poll cannot be woken). Polls wait at most MAX_POLL_MS each."""
    stage = Stage(Batching(max_records=100, within_s=5.0, accumulate=True), [None, [0], None, None])
    stage.run()
    assert stage.consumer.timeouts and max(stage.consumer.timeouts) <= MAX_POLL_MS
    assert stage.consumer.timeouts[0] == MAX_POLL_MS  # an empty batch waits in slices: a stop is seen within one


def test_a_sink_that_did_not_confirm_commits_nothing_and_ends_the_loop() -> None:
    stage = Stage(Batching(max_records=10, within_s=0.01, accumulate=False), [[0], [1]], sink_ok=False)
    stage.run()
    assert stage.consumer.commits == [] and stage.batches == 0
    assert stage.consumer.polls == [[1]]  # it stopped after the first batch
    assert stage.failed is None


def test_a_refused_commit_without_outage_policy_leaves_the_batch_to_be_reread_and_goes_on() -> None:
    stage = Stage(Batching(max_records=10, within_s=0.01, accumulate=False), [[0], [1]],
                  commit_errors=[KafkaTimeoutError()])
    stage.run()
    assert stage.failed is None
    assert stage.after == [False, True] and stage.commit_failures == 1
    assert stage.consumer.commits == [[0, 1]]


def test_a_commit_through_an_outage_is_retried_and_a_rebalance_is_not() -> None:
    waited = Stage(Batching(max_records=10, within_s=0.01, accumulate=False), [[0]], through_outage=True,
                   commit_errors=[KafkaTimeoutError(), KafkaTimeoutError()])
    waited.run()
    assert waited.after == [True] and waited.commit_retries == 2 and waited.consumer.commits == [[0]]
    rebalanced = Stage(Batching(max_records=10, within_s=0.01, accumulate=False), [[0], [1]], through_outage=True,
                       commit_errors=[CommitFailedError()])
    rebalanced.run()
    assert rebalanced.failed is None
    assert rebalanced.after == [False, True] and rebalanced.commit_failures == 1 and rebalanced.commit_retries == 0


def test_an_error_in_a_batch_ends_the_loop_with_failed_set_and_the_clients_closed() -> None:
    class Broken(Stage):
        def handle(self, consumer: Consumer, batch: Batch) -> bool:
            raise RuntimeError("a bug")

    stage = Broken(Batching(max_records=10, within_s=0.01, accumulate=False), [[0]])
    stage.run()
    assert isinstance(stage.failed, RuntimeError)
    assert stage.consumer.commits == [] and stage.consumer.closed


class AssignedConsumer:
    """Partitions assigned by hand: each poll returns the next scripted records (None: an empty poll, which
    advances the fake clock by the poll's timeout) and moves each partition's position past them."""

    def __init__(self, polls: list[list[tuple[TopicPartition, int]] | None], clock: list[float]) -> None:
        self.polls = polls
        self.clock = clock
        self.positions: dict[TopicPartition, int] = {}
        self.timeouts: list[int] = []

    def position(self, partition: TopicPartition) -> int:
        return self.positions.get(partition, 0)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Any]]:
        self.timeouts.append(timeout_ms)
        batch = self.polls.pop(0) if self.polls else None
        if batch is None:
            self.clock[0] += timeout_ms / 1000
            return {}
        out: dict[Any, list[Any]] = {}
        for tp, offset in batch:
            out.setdefault(tp, []).append(Rec(tp.topic, tp.partition, offset, None, b""))
            self.positions[tp] = offset + 1
        return out


A, B = TopicPartition("state", 0), TopicPartition("state", 1)


def test_read_to_end_yields_every_record_up_to_the_ends_and_stops_there() -> None:
    clock = [0.0]
    consumer = AssignedConsumer([[(A, 0), (B, 0)], None, [(A, 1)], [(B, 1)], [(A, 2)]], clock)
    got = [(r.partition, r.offset) for r in read_to_end(consumer, [A, B], {A: 2, B: 2}, clock=lambda: clock[0])]
    assert got == [(0, 0), (1, 0), (0, 1), (1, 1)]  # (A, 2) is past the end taken before the read: not polled
    assert consumer.polls == [[(A, 2)]] and consumer.timeouts == [1000] * 4


def test_read_to_end_of_partitions_already_at_their_ends_polls_nothing() -> None:
    consumer = AssignedConsumer([[(A, 0)]], [0.0])
    assert list(read_to_end(consumer, [A], {A: 0})) == [] and consumer.timeouts == []


def test_read_to_end_raises_when_nothing_arrives_for_stall_s_and_an_empty_poll_before_that_waits_on() -> None:
    clock = [0.0]
    waited = AssignedConsumer([None, None, [(A, 0)]], clock)
    assert [r.offset for r in read_to_end(waited, [A], {A: 1}, stall_s=2.0, clock=lambda: clock[0])] == [0]
    stalled = AssignedConsumer([[(A, 0)], None, None, None, [(A, 1)]], clock)
    read = read_to_end(stalled, [A], {A: 2}, stall_s=2.0, clock=lambda: clock[0])
    assert next(read).offset == 0
    with pytest.raises(KafkaTimeoutError, match="reading state made no progress for 2 s"):
        next(read)
    assert len(stalled.timeouts) == 4  # 2 s after the last record is no stall yet; the third empty poll, 3 s, is


class StepClock:
    """A clock that moves `step_s` each time it is read (each poll reads it at least once)."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def test_polls_within_the_gather_window_join_the_batch_and_an_empty_poll_or_the_window_ends_it() -> None:
    """One poll is one broker's fetch: on three brokers a step arrives in three polls a few ms apart, and each
    batch's decode has a fixed cost, so the decode stage gathers them into one batch (issue #24/#25)."""
    batching = Batching(max_records=100, within_s=0.2, accumulate=False, idle_poll_ms=1000, gather_s=0.05)
    stage = Stage(batching, [[0, 1], [2], [3], None, [4], [5, 6]])
    stage._clock = StepClock(0.001)
    stage.run()
    assert stage.failed is None
    # [0, 1] + [2] + [3] until the empty poll; [4] + [5, 6] until the script's last (empty) poll
    assert stage.batch_sizes == [4, 3]
    assert stage.consumer.commits == [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6]]
    assert stage.consumer.timeouts[0] == 200 and all(0 < t <= 50 for t in stage.consumer.timeouts[1:4])
    assert stage.consumer.timeouts[4] == 1000  # idle after the empty poll ended the batch

    slow = Stage(batching, [[0], [1], [2]])
    slow._clock = StepClock(0.03)  # each poll 30+ ms after the last: the window closes after two polls
    slow.run()
    assert slow.batch_sizes == [2, 1]

    full = Stage(Batching(max_records=3, within_s=0.2, accumulate=False, gather_s=10.0), [[0, 1], [2], [3]])
    full.run()
    assert full.batch_sizes == [3, 1]  # max_records ends the gathering
    assert full.consumer.rooms[:2] == [3, 1]


def test_without_a_gather_window_each_poll_is_still_its_own_batch() -> None:
    stage = Stage(Batching(max_records=100, within_s=0.05, accumulate=False), [[0, 1], [2], None])
    stage.run()
    assert stage.batch_sizes == [2, 1]


class RebalancingConsumer(ScriptedConsumer):
    """Partitions 0 and 1 of topic t; a poll's script entry may instead be a rebalance callback, run as
    kafka-python runs the subscription listener: inside that poll, which returns nothing."""

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Any]]:
        step = self.polls[0] if self.polls else None
        if callable(step):
            self.polls.pop(0)
            self.timeouts.append(timeout_ms)
            step(self.loop.revocations)
            return {}
        if step is None or not self.polls:
            return super().poll(timeout_ms, max_records)
        self.polls.pop(0)
        self.timeouts.append(timeout_ms)
        partition, offsets = step
        tp = TopicPartition("t", partition)
        return {tp: [Rec("t", partition, o, None, b"") for o in offsets]}


def test_a_batch_in_hand_waits_out_a_rebalance_and_loses_only_the_partitions_that_moved() -> None:
    """Eager rebalance: every partition revoked, then the new assignment; a partition kept keeps its position
    in kafka-python, so its records are handled here; one that moved is read by its next owner from the
    committed offsets, so its records leave the batch (handled here too, they were decoded twice)."""
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    batching = Batching(max_records=100, within_s=0.2, accumulate=False, gather_s=0.05)
    polls: list[Any] = [(0, [0, 1]), (1, [5, 6]),
                        lambda listener: listener.on_partitions_revoked({t0, t1}),
                        None,  # the join still running: an empty poll would end a gathering batch
                        lambda listener: listener.on_partitions_assigned({t1}),
                        (1, [7])]
    stage = Stage(batching, [])
    stage.consumer = RebalancingConsumer(stage, polls, [])
    stage._clock = StepClock(0.001)
    held: list[int] = []
    stage.while_held = lambda consumer: held.append(len(stage._batch))  # type: ignore[method-assign]
    stage.run()
    assert stage.failed is None
    assert held == [4, 4]  # after the poll that revoked and the one that found the join still running
    assert stage.batch_sizes == [2, 1]  # [5, 6] of the kept partition 1 after the join; then [7]
    assert stage.handled == [5, 6, 7]
    assert stage.moved_records == 2
    assert stage.consumer.timeouts[3] >= 100  # held: no zero-timeout polls while the join runs

    lost = Stage(batching, [])
    lost.consumer = RebalancingConsumer(lost, [(0, [0, 1]), lambda listener: listener.on_partitions_lost({t0}),
                                               (0, [0])], [])
    lost._clock = StepClock(0.001)
    lost.run()
    assert lost.handled == [0]  # the member fell out of the group: re-read from the committed offset
