"""Producer side of the coarse-to-fine loop: follow the control topic, hand commands to the hook.

Two ways, one per transport:

- `ControlFollower` (each rank sends to Kafka itself): a daemon thread runs a kafka-python consumer
  (`ControlTopicFollower`, principal `producer`) with no consumer group: every rank reads every
  command and keeps the ones naming it (RankHook.submit_command counts the others). It starts
  reading at the hook's start time (offsets_for_times), so a command issued after the rank came up
  is never missed, and old commands of a previous run are not replayed.
- `RelayControlFollower` (the rank sends through the node relay, STEPLENS_RELAY_CONTROL on): no Kafka
  client in the rank. The relay follows the control topic once for the node (producers/relay/control.py)
  and pushes each command to the ranks it names over a subscription connection on the relay's socket;
  this thread reads them and calls submit_command the same way. At fleet scale that is one consumer
  per node instead of one per rank, each fetching every command.

Errors only delay commands; they never reach the training thread.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from infra.backoff import Backoff
from infra.clients import kafka_client_config
from infra.settings import Settings
from producers.hook.core import RankHook
from producers.relay.framing import PUSH, FrameError, Hello, decode_push, encode_subscribe
from schemas import ContractError, ControlCommand, Topics, decode_as

log = logging.getLogger(__name__)

# What a ControlTopicFollower hands on for each record: value, partition, offset, timestamp (ms).
RecordHandler = Callable[[bytes, int, int, int], None]


def submit_raw(hook: RankHook, raw: bytes, invalid: int, received: int) -> tuple[int, int]:
    """Decode a control record and hand it to the hook; the (invalid, received) counts after it."""
    try:
        cmd = decode_as(ControlCommand, raw)
    except ContractError:
        return invalid + 1, received
    hook.submit_command(cmd)
    return invalid, received + 1


class DaemonLoop:
    """A follower's thread: `_run` loops until `stop()`; `ready` says it is connected now."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError


class ControlTopicFollower(DaemonLoop):
    """Reads `topics.control` from `since_ms` on (no group) and hands every record to `on_record`.

    `ready`: assigned and positioned at since_ms."""

    def __init__(self, on_record: RecordHandler, settings: Settings, topics: Topics, *, client_id: str,
                 since_ms: int | None = None, poll_s: float = 0.5) -> None:
        self._on_record = on_record
        self._settings = settings
        self._topic = topics.control
        self._client_id = client_id
        self.since_ms = since_ms if since_ms is not None else time.time_ns() // 1_000_000
        self._poll_ms = int(poll_s * 1000)
        super().__init__("steplens-control")

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer: Any = None
            try:
                consumer = self._connect()
                self.ready.set()
                while not self._stop.is_set():
                    for records in consumer.poll(timeout_ms=self._poll_ms).values():
                        for rec in records:
                            self._on_record(rec.value, rec.partition, rec.offset, rec.timestamp)
            except Exception:
                log.debug("control follower error; reconnecting", exc_info=True)
                self._stop.wait(1.0)
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()

    def _connect(self) -> Any:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(**kafka_client_config(self._settings, "producer"), group_id=None,
                                 enable_auto_commit=False, client_id=self._client_id)
        parts = None
        deadline = time.monotonic() + 30
        while not parts and not self._stop.is_set() and time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(self._topic)
            if not parts:
                self._stop.wait(0.5)
        if not parts:
            consumer.close()
            raise RuntimeError(f"control topic {self._topic} not found")
        tps = [TopicPartition(self._topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        # The end offsets first, then the times: a partition with no record since since_ms starts at the
        # end it had BEFORE that answer, so a record written meanwhile is read. (seek_to_end would be
        # resolved lazily at the first poll, after records written since were skipped.)
        ends = consumer.end_offsets(tps)
        offsets = consumer.offsets_for_times(dict.fromkeys(tps, self.since_ms))
        for tp in tps:
            found = offsets.get(tp)
            consumer.seek(tp, ends[tp] if found is None else found.offset)
        return consumer


class ControlFollower(ControlTopicFollower):
    """A rank's own consumer of `topics.control`: submits each valid command to `hook`."""

    def __init__(self, hook: RankHook, settings: Settings, topics: Topics, *, since_ms: int | None = None,
                 poll_s: float = 0.5) -> None:
        super().__init__(self._on_value, settings, topics, client_id=f"steplens-control-{hook.rank.rank}",
                         since_ms=since_ms, poll_s=poll_s)
        self.hook = hook
        self.received = 0
        self.invalid = 0

    def _on_value(self, raw: bytes, _partition: int, _offset: int, _ts_ms: int) -> None:
        self.invalid, self.received = submit_raw(self.hook, raw, self.invalid, self.received)


class RelayControlFollower(DaemonLoop):
    """Subscribes to the node relay at `path` for the commands naming this rank; submits them to `hook`.

    Reconnects with backoff (no relay yet, a relay restart, a relay with control off), and again at
    once when the hook's identity changes (`with_rank` after torch.distributed came up). `since_ms`
    (the hook's start) lets the relay hand over commands it read before this rank subscribed; a
    command pushed twice (a replay after a reconnect) is recognised by its partition and offset.
    """

    def __init__(self, hook: RankHook, path: Path | str, *, since_ms: int | None = None, poll_s: float = 0.5,
                 retry_s: float = 0.5, retry_max_s: float = 30.0, remember: int = 4096) -> None:
        self.hook = hook
        self.path = str(path)
        self.since_ms = since_ms if since_ms is not None else time.time_ns() // 1_000_000
        self._poll_s = poll_s
        self._retry = (retry_s, retry_max_s)
        self._seen: deque[tuple[int, int]] = deque(maxlen=remember)
        self._seen_set: set[tuple[int, int]] = set()
        self.received = 0
        self.invalid = 0
        self.duplicates = 0
        self.subscriptions = 0
        super().__init__("steplens-relay-control")  # `ready`: subscribed to a relay now

    def _identity(self) -> tuple[str, int]:
        return self.hook.rank.job, self.hook.rank.rank

    def _run(self) -> None:
        backoff = Backoff(self._stop.wait, self._retry)
        while not self._stop.is_set():
            ident = self._identity()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self._poll_s)
                sock.connect(self.path)
                sock.sendall(encode_subscribe(Hello(job=ident[0], rank=ident[1], since_ms=self.since_ms)))
                self._read(sock, ident, on_subscribed=lambda: self.ready.set())
                backoff.reset()  # the identity changed, or we are stopping: subscribe again at once
                continue
            except (OSError, FrameError) as exc:
                log.debug("relay control subscription at %s ended: %s", self.path, exc)
            finally:
                self.ready.clear()
                sock.close()
            backoff.pause()

    def _read(self, sock: socket.socket, ident: tuple[str, int], on_subscribed: Callable[[], None]) -> None:
        """Read pushes until stopped or the identity changed; raises when the relay goes away."""
        buf = bytearray()
        subscribed = False
        while not self._stop.is_set() and self._identity() == ident:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                raise ConnectionError("the relay closed the control connection")
            buf += chunk
            while len(buf) >= PUSH.size:
                (n,) = PUSH.unpack_from(buf)
                if len(buf) < PUSH.size + n:
                    break
                body = bytes(buf[PUSH.size:PUSH.size + n])
                del buf[:PUSH.size + n]
                if not subscribed:
                    if body:
                        raise FrameError("a push before the subscription was confirmed")
                    subscribed = True
                    self.subscriptions += 1
                    on_subscribed()
                    continue
                self._on_push(body)

    def _on_push(self, body: bytes) -> None:
        partition, offset, raw = decode_push(body)
        where = (partition, offset)
        if where in self._seen_set:
            self.duplicates += 1
            return
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(where)
        self._seen_set.add(where)
        self.invalid, self.received = submit_raw(self.hook, raw, self.invalid, self.received)


__all__ = ["ControlFollower", "ControlTopicFollower", "RecordHandler", "RelayControlFollower"]
