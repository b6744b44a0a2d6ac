"""The node relay's control loop: ONE control-topic consumer per node, commands pushed to the ranks they name.

Why: with a consumer per rank (producers/hook/control.py, no group) a 10,240-rank job runs 10,240
consumers, each fetching every command. The relay already holds the node's one Kafka client; it
follows `steplens.control` once (`ControlTopicFollower`, principal `producer`, no group, from the
relay's start time minus CONTROL_LOOKBACK_S via offsets_for_times) and the `ControlHub` hands each
valid command to the subscribed ranks of its job that it names (all of them when it names none).
Ranks subscribe over the relay socket (framing.SUBSCRIBE) with job, rank and since_ms; the hub keeps
the last commands it read so a rank subscribing late (started before the relay, or reconnecting)
still gets the ones issued since its own start. The look-back makes a relay restart lose no command
published while the node had no relay (up to CONTROL_LOOKBACK_S): ranks get what they missed, and
drop by partition and offset what the previous relay already pushed them; commands older than a
rank's start are never pushed to it. A push never blocks the hub: a subscriber whose socket is
full is disconnected (it reconnects and gets the replay).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from infra.settings import Settings
from producers.hook.control import ControlTopicFollower
from producers.relay.framing import Hello, encode_push
from schemas import ContractError, ControlCommand, Topics, decode_as

log = logging.getLogger(__name__)

CONTROL_LOOKBACK_S = 60.0  # a new relay reads the control topic from this long before its start


@dataclass(frozen=True, slots=True)
class ControlStats:
    """received: valid commands read; invalid: records that are not commands; pushed: command x rank
    deliveries (replays included); unrouted: commands naming no subscribed rank when read; disconnected:
    subscribers dropped because their socket was full; subscribers: subscribed now."""

    received: int = 0
    invalid: int = 0
    pushed: int = 0
    unrouted: int = 0
    disconnected: int = 0
    subscribers: int = 0


def names(cmd: ControlCommand, job: str, rank: int) -> bool:
    """Whether `cmd` is for this rank (the hook still checks, and counts what it ignores)."""
    return cmd.job == job and (not cmd.ranks or rank in cmd.ranks)


class Subscriber:
    """One rank's control connection on the relay."""

    def __init__(self, conn: socket.socket, hello: Hello) -> None:
        self.conn = conn
        self.hello = hello
        self.alive = True

    def push(self, msg: bytes) -> bool:
        """Send without blocking; a short or refused send ends the connection (False)."""
        if not self.alive:
            return False
        try:
            sent = self.conn.send(msg, socket.MSG_DONTWAIT)
        except OSError:
            sent = -1
        if sent == len(msg):
            return True
        self.alive = False
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)  # the rank sees EOF, reconnects and gets the replay
        return False


class ControlHub:
    """Routes control commands to subscribed ranks; remembers the last `keep` for late subscribers."""

    def __init__(self, keep: int = 256) -> None:
        self._lock = threading.Lock()
        self._subs: list[Subscriber] = []
        self._recent: deque[tuple[ControlCommand, bytes, int]] = deque(maxlen=keep)  # (cmd, push, ts_ms)
        self._counts = {"received": 0, "invalid": 0, "pushed": 0, "unrouted": 0, "disconnected": 0}

    def stats(self) -> ControlStats:
        with self._lock:
            return ControlStats(**self._counts, subscribers=len(self._subs))

    def add(self, sub: Subscriber, greeting: bytes = b"") -> int:
        """Subscribe; first send `greeting` (the rank's "subscribed"), then push the remembered commands
        naming it issued from its since_ms on. How many. All under the lock: a command read after the
        rank saw its greeting is routed to it, never counted as for no rank here."""
        h = sub.hello
        with self._lock:
            if greeting:
                sub.conn.sendall(greeting)
            replay = [msg for cmd, msg, ts in self._recent if ts >= h.since_ms and names(cmd, h.job, h.rank)]
            sent = 0
            for msg in replay:
                if not sub.push(msg):
                    self._counts["disconnected"] += 1
                    return sent
                sent += 1
            self._counts["pushed"] += sent
            self._subs.append(sub)
            return sent

    def remove(self, sub: Subscriber) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def on_record(self, value: bytes, partition: int, offset: int, ts_ms: int) -> None:
        """A control-topic record: validate, remember, push to the ranks it names."""
        try:
            cmd = decode_as(ControlCommand, value)
        except ContractError:
            with self._lock:
                self._counts["invalid"] += 1
            return
        msg = encode_push(partition, offset, value)
        with self._lock:
            self._counts["received"] += 1
            self._recent.append((cmd, msg, ts_ms))
            targets = [s for s in self._subs if names(cmd, s.hello.job, s.hello.rank)]
            if not targets:
                self._counts["unrouted"] += 1
            for sub in targets:
                if sub.push(msg):
                    self._counts["pushed"] += 1
                else:
                    self._counts["disconnected"] += 1
                    self._subs.remove(sub)


class NodeControl:
    """The hub and, unless given none, the relay's control-topic follower feeding it."""

    def __init__(self, hub: ControlHub, follower: ControlTopicFollower | None = None) -> None:
        self.hub = hub
        self.follower = follower

    def start(self) -> NodeControl:
        if self.follower is not None:
            self.follower.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self.follower is not None:
            self.follower.stop(timeout)


def node_control(settings: Settings, topics: Topics, *, since_ms: int | None = None) -> NodeControl | None:
    """The relay's control loop, or None when Settings.relay_control is off (ranks follow on their own)."""
    if not settings.relay_control:
        return None
    hub = ControlHub()
    if since_ms is None:
        since_ms = time.time_ns() // 1_000_000 - int(CONTROL_LOOKBACK_S * 1000)
    follower = ControlTopicFollower(hub.on_record, settings, topics, client_id=f"steplens-relay-control-{os.getpid()}",
                                    since_ms=since_ms)
    return NodeControl(hub, follower)


__all__ = ["CONTROL_LOOKBACK_S", "ControlHub", "ControlStats", "NodeControl", "Subscriber", "names", "node_control"]
