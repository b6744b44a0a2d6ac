"""The consumer runtime's batching, commit order and commit policies, with an in-memory consumer (pure unit tests)."""

from __future__ import annotations

from typing import Any, NamedTuple

from kafka.errors import CommitFailedError, KafkaTimeoutError

from streams.runtime import Batch, Batching, Commits, Consumer, ConsumerLoop


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
