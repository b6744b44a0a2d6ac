"""Control commands through the node relay.

Without Kafka (the hub fed directly, the relay in-process, real Unix sockets, real RankHooks):
routing to exactly the named ranks of the job, the replay for a rank subscribing late, the rank-side
dedup after a relay restart, and a relay without control refusing subscriptions.
With Kafka: a real `python -m producers.relay` process follows the control topic for the node and
ranks started by `producers.hook.start` (STEPLENS_RELAY_SOCKET set, no consumer of their own) get the
commands naming them and no others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.hook import start as start_hook
from producers.hook.control import ControlFollower, ControlTopicFollower, RelayControlFollower
from producers.hook.core import RankHook, RankInfo
from producers.hook.profiling import ProfilerBackend, ProfileRequest
from producers.relay import Relay
from producers.relay.control import ControlHub, NodeControl
from schemas import ControlCommand, Domain, Topics
from schemas import encode as encode_event


def _no_profiler(req: ProfileRequest) -> ProfilerBackend:
    raise AssertionError(f"no step runs in these tests: {req}")


def _hook(job: str, rank: int) -> RankHook:
    info = RankInfo(job=job, rank=rank, world=4, host="node-0", device=rank,
                    domains={"dp": Domain(group=0, size=4, index=rank)})
    return RankHook(info, lambda: BackgroundEmitter(InMemoryExporter(), Topics(), spool_dir=None),
                    profiler_factory=_no_profiler, track_gc=False)


def _cmd(cid: str, job: str, ranks: list[int], action: str = "profile_on") -> ControlCommand:
    return ControlCommand(command_id=cid, job=job, action=action, ranks=ranks,  # type: ignore[arg-type]
                          step_first=10, step_count=3, issued_ns=time.time_ns())


def _until(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _seen(hook: RankHook) -> tuple[int, dict[str, int]]:
    st = hook.stats()
    return st.commands_accepted, st.commands_ignored


@pytest.fixture
def sink() -> Iterator[BackgroundEmitter]:
    em = BackgroundEmitter(InMemoryExporter(), Topics(), spool_dir=None, flush_interval_s=0.01)
    yield em
    em.close(10)


def test_the_relay_pushes_a_command_to_exactly_the_ranks_it_names(sock_dir: Path, sink: BackgroundEmitter) -> None:
    hub = ControlHub()
    now_ms = time.time_ns() // 1_000_000
    hub.on_record(encode_event(_cmd("early", "job-a", [2])), 0, 0, now_ms)  # read before rank 2 subscribed
    hub.on_record(b"not a command", 0, 1, now_ms)
    relay = Relay(sock_dir / "r.sock", sink, control=NodeControl(hub)).start()
    hooks = {("job-a", r): _hook("job-a", r) for r in range(3)} | {("job-b", 1): _hook("job-b", 1)}
    followers = [RelayControlFollower(h, relay.path, since_ms=now_ms - 1000).start() for h in hooks.values()]
    try:
        assert all(f.ready.wait(30) for f in followers)
        assert _until(lambda: _seen(hooks[("job-a", 2)]) == (1, {}))  # the replay of what it missed
        hub.on_record(encode_event(_cmd("c1", "job-a", [1])), 1, 0, now_ms + 1)
        # a command for every rank of job-a, after c1 on the same relay connection: once every job-a
        # rank has it, c1 has reached every rank it was pushed to
        hub.on_record(encode_event(_cmd("barrier", "job-a", [], action="profile_off")), 1, 1, now_ms + 2)
        assert _until(lambda: all(h.stats().commands_ignored.get("unsupported") == 1
                                  for (job, _), h in hooks.items() if job == "job-a"))
        assert _seen(hooks[("job-a", 0)]) == (0, {"unsupported": 1})
        assert _seen(hooks[("job-a", 1)]) == (1, {"unsupported": 1})
        assert _seen(hooks[("job-a", 2)]) == (1, {"unsupported": 1})
        assert _seen(hooks[("job-b", 1)]) == (0, {})  # same rank id, other job: nothing pushed
        st = hub.stats()
        assert (st.received, st.invalid, st.pushed, st.unrouted, st.subscribers) == (3, 1, 5, 1, 4)
        assert relay.stats().subscriptions == 4
    finally:
        for f in followers:
            f.stop()
        relay.stop()


def test_a_late_subscriber_gets_only_commands_since_its_start_and_a_relay_restart_no_duplicates(
        sock_dir: Path, sink: BackgroundEmitter) -> None:
    hub = ControlHub()
    now_ms = time.time_ns() // 1_000_000
    hub.on_record(encode_event(_cmd("before-start", "job-a", [0])), 0, 0, now_ms - 5000)
    hub.on_record(encode_event(_cmd("after-start", "job-a", [0])), 0, 1, now_ms)
    path = sock_dir / "r.sock"
    relay = Relay(path, sink, control=NodeControl(hub)).start()
    hook = _hook("job-a", 0)
    follower = RelayControlFollower(hook, path, since_ms=now_ms - 1000, retry_s=0.05, retry_max_s=0.2).start()
    try:
        assert follower.ready.wait(30)
        assert _until(lambda: follower.received == 1)
        relay.stop()  # a restart: the same hub replays after-start to the reconnecting rank
        assert _until(lambda: not follower.ready.is_set())
        relay = Relay(path, sink, control=NodeControl(hub)).start()
        assert _until(lambda: follower.subscriptions == 2 and follower.duplicates == 1)
        assert (follower.received, _seen(hook)) == (1, (1, {}))
    finally:
        follower.stop()
        relay.stop()


def test_a_relay_without_control_refuses_subscriptions_and_keeps_taking_records(
        sock_dir: Path, sink: BackgroundEmitter) -> None:
    relay = Relay(sock_dir / "r.sock", sink).start()
    follower = RelayControlFollower(_hook("job-a", 0), relay.path, retry_s=0.05, retry_max_s=0.1).start()
    try:
        assert _until(lambda: relay.stats().subscriptions_refused >= 2)  # it keeps retrying, never subscribed
        assert not follower.ready.is_set() and follower.subscriptions == 0
    finally:
        follower.stop()
        relay.stop()


@pytest.mark.integration
@pytest.mark.kafka
def test_a_command_written_while_the_control_follower_positions_itself_is_read(settings: Settings) -> None:
    """The follower positioned on a control topic with nothing since its since_ms, a command written
    before its first poll: read (a lazy seek to the end at that poll once skipped it; CI saw the relay
    lose every command of a test so)."""
    from kafka import KafkaProducer

    from infra.clients import kafka_client_config

    topics = Topics(settings.topic_prefix)
    follower = ControlTopicFollower(lambda *_: None, settings, topics, client_id="steplens-test-control",
                                    since_ms=time.time_ns() // 1_000_000)
    consumer = follower._connect()  # assigned and positioned, as its thread does before its first poll
    got: list[tuple[int, int]] = []
    try:
        producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
        producer.send(topics.control, key=b"job", value=encode_event(_cmd("c", "job", [0])))
        producer.flush()
        producer.close()
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset) for r in records]
        assert len(got) == 1, got
    finally:
        consumer.close()


@pytest.mark.integration
@pytest.mark.kafka
def test_commands_reach_exactly_the_named_rank_through_a_relay_process(settings: Settings) -> None:
    from kafka import KafkaProducer

    from infra.clients import kafka_client_config
    from tests.producers.relay._process import RelayProcess

    topics = Topics(settings.topic_prefix)
    job, target = "relay-ctl", 1
    relay: RelayProcess | None = RelayProcess(settings)
    hooks = [start_hook(job, rank=r, world=3, settings=settings, profiler_factory=_no_profiler, register=False)
             for r in range(3)]
    try:
        followers = [f for h in hooks for f in h._followers]
        # no rank runs a Kafka consumer of its own: one subscription each on the relay
        assert all(isinstance(f, RelayControlFollower) for f in followers) and len(followers) == 3
        assert not any(isinstance(f, ControlFollower) for f in followers)
        assert all(isinstance(f, RelayControlFollower) and f.ready.wait(60) for f in followers)
        producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
        for cmd in (_cmd("cmd-1", job, [target]), _cmd("other-job", "another-job", [target]),
                    _cmd("barrier", job, [], action="profile_off")):
            producer.send(topics.control, key=job.encode(), value=encode_event(cmd))  # one partition: in order
        producer.flush()
        producer.close()
        assert _until(lambda: all(h.stats().commands_ignored.get("unsupported") == 1 for h in hooks), 120)
        for r, h in enumerate(hooks):
            assert _seen(h) == ((1, {"unsupported": 1}) if r == target else (0, {"unsupported": 1})), r
        assert relay is not None
        err = relay.stop()
        relay = None
        assert "3 subscriptions, 3 commands read, 4 pushed, 1 for no rank here, 0 invalid" in err, err

        # a command published while the node has no relay still arrives once a new relay runs (it reads
        # from CONTROL_LOOKBACK_S before its start); what the ranks already had is not submitted again
        producer = KafkaProducer(**kafka_client_config(settings, "admin"), acks="all")
        producer.send(topics.control, key=job.encode(), value=encode_event(_cmd("cmd-2", job, [target])))
        producer.flush()
        producer.close()
        relay = RelayProcess(settings)
        dups = {r: 2 if r == target else 1 for r in range(3)}  # cmd-1 and the barrier again, or the barrier
        assert _until(lambda: _seen(hooks[target])[0] == 2
                      and all(f.duplicates == dups[r] for r, f in enumerate(followers)), 120)
        for r, h in enumerate(hooks):
            assert _seen(h) == ((2, {"unsupported": 1}) if r == target else (0, {"unsupported": 1})), r
    finally:
        for h in hooks:
            h.close(10)
        err = relay.stop() if relay is not None else ""
    assert "4 commands read" in err, err
