"""The landing loop's commit discipline and the lander's retry, with in-memory stand-ins (pure unit tests)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from typing import Any, NamedTuple

from kafka.errors import KafkaTimeoutError, UnsupportedVersionError

from infra.settings import load_settings
from schemas import Topics, encode
from sinks.lander import ClickHouseLander
from sinks.rows import row_for
from sinks.writer import BatchingWriter
from streams.land.loop import LandLoop, consumer_options
from streams.land.processor import LandingProcessor
from streams.land.worker import CRASH_EXIT_CODE
from tests.sinks.fakes import FakeBackend
from tests.sinks.samples import incident, step
from tests.streams.helpers import step_event

TOPICS = Topics("p.")


class FakeRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class FakeConsumer:
    """What LandLoop uses of a kafka-python consumer: poll and commit (commits record what was landed then)."""

    def __init__(self, loop: LandLoop, batches: list[list[FakeRecord]], landed: list[int]) -> None:
        self.loop = loop
        self.batches = batches
        self.landed = landed
        self.commits: list[list[int]] = []

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Any]]:
        if not self.batches:
            self.loop.stopping.set()
            return {}
        return {"tp": self.batches.pop(0)}

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        self.commits.append(list(self.landed))

    def close(self) -> None:
        pass


class FakeSender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None]] = []

    def send(self, topic: str, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> Any:
        self.sent.append((topic, key))
        return _Done()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Done:
    def get(self, timeout: float) -> None:
        return None


class RecordingLander:
    """Stands in for ClickHouseLander: remembers the offsets of the rows it was given, or fails."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.offsets: list[int] = []
        self.fail_on = fail_on

        self.closed = 0

    def write(self, batch: list[Any], sources: list[Any] | None = None, blocks: list[Any] | None = None) -> None:
        assert sources is not None
        offsets = [o for _, _, o in sources]  # a block's spans: every offset between (this test's are dense)
        offsets += [o for b in blocks or () for _, _, first, last in b.spans for o in range(first, last + 1)]
        if self.fail_on is not None and self.fail_on in offsets:
            raise RuntimeError("a bug")
        self.offsets.extend(offsets)

    def close(self) -> None:
        self.closed += 1


def _run_loop(batches: list[list[FakeRecord]], lander: RecordingLander) -> tuple[LandLoop, FakeConsumer, FakeSender]:
    settings = replace(load_settings({}), sink_batch_size=2, sink_batch_seconds=60.0)
    processor = LandingProcessor(TOPICS, settings.max_event_bytes)
    sender = FakeSender()
    holder: dict[str, FakeConsumer] = {}
    loop = LandLoop(settings, processor, lander,  # type: ignore[arg-type]
                    clients=lambda: (holder["c"], sender))
    holder["c"] = FakeConsumer(loop, batches, lander.offsets)
    loop.run()  # in this thread: returns when the fake consumer runs dry
    return loop, holder["c"], sender


def _rec(offset: int, value: bytes | None = None) -> FakeRecord:
    good = encode(step_event(1, offset, 400.0))
    return FakeRecord(TOPICS.steps, 0, offset, b"k", value if value is not None else good)


def test_offsets_are_committed_only_after_their_batch_is_landed() -> None:
    lander = RecordingLander()
    loop, consumer, sender = _run_loop([[_rec(0), _rec(1)], [_rec(2), _rec(3, b"garbage")]], lander)
    assert loop.failed is None
    assert consumer.commits == [[0, 1], [0, 1, 2, 3]]  # each commit came after its batch's rows
    # the garbage is a dead letter, sent with its batch
    assert sender.sent == [(Topics(loop.settings.topic_prefix).deadletter, b"k")]
    assert lander.closed == 1  # by the loop's own thread, the one its chdb session is bound to


def _sample(loop: LandLoop, name: str) -> float:
    value = loop.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


def test_metrics_count_landed_records_dead_letters_and_the_commit_clock() -> None:
    lander = RecordingLander()
    loop, _, _ = _run_loop([[_rec(0), _rec(1)], [_rec(2), _rec(3, b"garbage")]], lander)
    assert _sample(loop, "steplens_land_messages_total") == 4
    assert _sample(loop, "steplens_land_dead_letters_total") == 1
    assert _sample(loop, "steplens_land_batches_total") == 2
    assert _sample(loop, "steplens_land_last_commit_timestamp_seconds") > 0
    assert _sample(loop, "steplens_land_pending_since_timestamp_seconds") == 0  # everything read is committed


def test_a_batch_that_cannot_land_keeps_its_read_time_for_the_stalled_commits_alert() -> None:
    lander = RecordingLander(fail_on=2)
    loop, _, _ = _run_loop([[_rec(0), _rec(1)], [_rec(2), _rec(3)]], lander)
    assert _sample(loop, "steplens_land_batches_total") == 1
    assert _sample(loop, "steplens_land_pending_since_timestamp_seconds") > 0  # read, never committed


def test_a_failed_batch_is_never_committed_and_stops_the_loop() -> None:
    lander = RecordingLander(fail_on=2)
    loop, consumer, _ = _run_loop([[_rec(0), _rec(1)], [_rec(2), _rec(3)], [_rec(4), _rec(5)]], lander)
    assert consumer.commits == [[0, 1]]  # the failed batch and everything after it stay uncommitted
    assert isinstance(loop.failed, RuntimeError)


class OutageConsumer(FakeConsumer):
    """The broker is away for the first `down` commits (kafka-python raises its retriable timeout)."""

    def __init__(self, loop: LandLoop, batches: list[list[FakeRecord]], landed: list[int], down: int,
                 error: Exception) -> None:
        super().__init__(loop, batches, landed)
        self.down = down
        self.error = error
        self.attempts = 0

    def commit(self, offsets: Any = None, timeout_ms: int | None = None) -> None:
        self.attempts += 1
        if self.attempts <= self.down:
            raise self.error
        super().commit(offsets, timeout_ms)


def _run_outage(down: int, error: Exception) -> tuple[LandLoop, OutageConsumer]:
    settings = replace(load_settings({}), sink_batch_size=2, sink_batch_seconds=60.0)
    lander = RecordingLander()
    holder: dict[str, OutageConsumer] = {}
    loop = LandLoop(settings, LandingProcessor(TOPICS, settings.max_event_bytes), lander,  # type: ignore[arg-type]
                    clients=lambda: (holder["c"], FakeSender()), commit_backoff_s=(0.001, 0.002))
    holder["c"] = OutageConsumer(loop, [[_rec(0), _rec(1)], [_rec(2), _rec(3)]], lander.offsets, down, error)
    loop.run()
    return loop, holder["c"]


def test_a_commit_during_a_broker_outage_is_retried_and_the_loop_lives_on() -> None:
    loop, consumer = _run_outage(5, KafkaTimeoutError())
    assert loop.failed is None  # it did not exit (a worker without landing for the whole outage)
    assert loop.commit_retries == 5 and loop.commit_failures == 0
    assert consumer.commits == [[0, 1], [0, 1, 2, 3]]  # the landed batch committed once the broker was back
    assert loop.batches == 2


def test_a_non_retriable_commit_error_still_stops_the_loop() -> None:
    loop, consumer = _run_outage(1, UnsupportedVersionError())
    assert isinstance(loop.failed, UnsupportedVersionError)
    assert consumer.commits == [] and loop.commit_retries == 0


def test_a_partial_batch_is_landed_once_it_is_old_enough() -> None:
    now = [0.0]
    settings = replace(load_settings({}), sink_batch_size=100, sink_batch_seconds=1.0)
    lander = RecordingLander()
    holder: dict[str, FakeConsumer] = {}
    loop = LandLoop(settings, LandingProcessor(TOPICS, settings.max_event_bytes), lander,  # type: ignore[arg-type]
                    clients=lambda: (holder["c"], FakeSender()), clock=lambda: now[0])
    consumer = holder["c"] = FakeConsumer(loop, [[_rec(0)], []], lander.offsets)
    polls = consumer.poll

    def poll_and_tick(timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Any]]:
        now[0] += 0.6
        return polls(timeout_ms, max_records)

    consumer.poll = poll_and_tick  # type: ignore[method-assign]
    loop.run()
    assert consumer.commits == [[0]]


def test_the_lander_retries_until_the_rows_land_and_never_writes_a_row_twice() -> None:
    settings = load_settings({})
    backend = FakeBackend()
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # the backend recovers after the third failed write
        pauses.append(seconds)
        backend.fail = len(pauses) < 3

    lander = ClickHouseLander(settings, max_backoff_s=0.01, wait=pause)
    lander._writer = BatchingWriter(backend, max_rows=2, max_seconds=0.01, max_buffered_rows=3)
    backend.fail = True
    batch = [row_for(step(rank=r), 1) for r in range(5)] + [row_for(incident(), 1)]
    lander.write(batch)  # returns only once every row landed
    assert lander.write_failures == 3 and pauses == [0.5, 0.01, 0.01]
    lander.close()
    assert sorted(backend.rows("steps")) == sorted(tr.row for tr in batch[:5])  # each exactly once
    assert backend.rows("incidents") == [batch[5].row]


def test_crash_process_exits_the_whole_process_with_its_status() -> None:
    code = "from streams.land.worker import crash_process; crash_process(RuntimeError('boom')); print('survived')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == CRASH_EXIT_CODE
    assert "survived" not in done.stdout
    assert "boom" in done.stderr


STUCK_STOP = """
import threading, time
import streams.land.worker as w
w.STOP_GRACE_S = 0.5
class Stuck(threading.Thread):  # a loop whose batch in hand never finishes inserting (ClickHouse away)
    failed = None
    batches = 0
    def __init__(self, *args):
        super().__init__(daemon=True)
        self.metrics = type("M", (), {"serve": lambda *a: None})()
    def run(self):
        time.sleep(3600)
    def stop(self, timeout=30.0):  # ConsumerLoop.stop's default
        self.join(timeout)
w.LandLoop = Stuck
w.ClickHouseLander = lambda settings: None
w.LandingProcessor = lambda *a, **k: None
stop = threading.Event(); stop.set()
from infra.settings import load_settings
print("returned", w.run_land(load_settings({}), stop))
"""


def test_a_stop_leaves_a_batch_that_never_finishes_inserting_within_its_grace() -> None:
    """SIGTERM while the batch in hand waits on ClickHouse: the worker exits 0 after the grace, the batch
    uncommitted (before: it returned and exited normally with the loop's thread still holding the store)."""
    done = subprocess.run([sys.executable, "-c", STUCK_STOP], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "returned" not in done.stdout
    assert "did not finish" in done.stderr


def test_land_fetches_wait_on_the_broker_for_a_batch_worth_not_each_few_records() -> None:
    """A filling batch waits `sink_batch_seconds` anyway: a fetch answered at once with whatever had come in
    (kafka-python's fetch_min_bytes=1) made the land worker's polls ~2/3 of the broker's CPU per event."""
    options = consumer_options(load_settings({}))
    assert options["fetch_min_bytes"] >= 64 << 10
    assert 0 < options["fetch_max_wait_ms"] <= 500
    assert options["enable_auto_commit"] is False and options["max_poll_records"] == 20000
    # a short batch window shortens the wait: a fetch never holds a batch past a quarter of its window
    short = consumer_options(replace(load_settings({}), sink_batch_seconds=0.4, sink_fetch_max_wait_ms=900))
    assert short["fetch_max_wait_ms"] == 100
    env = consumer_options(load_settings({"STEPLENS_SINK_FETCH_MIN_BYTES": "4096",
                                          "STEPLENS_SINK_FETCH_MAX_WAIT_MS": "50"}))
    assert (env["fetch_min_bytes"], env["fetch_max_wait_ms"]) == (4096, 50)
