"""The node relay: accepts ranks' record frames on a Unix socket and queues them for ONE Kafka client.

Each connection (one per rank process) has a thread that reads a frame, offers its records to the
node's BackgroundEmitter (`emit_records`: bounded queue, spool while Kafka is down, counted drops)
and answers how many it took; what the queue could not take stays with the rank, which spools and
retries it. Records are forwarded with topic, key and value unchanged, in the order each connection
sent them, so a rank's records keep their key (job/rank) and their order.

Loss window. With durable acks (the default, Settings.relay_durable_ack) a frame is acknowledged only
once its records are in Kafka (acks=all) or in the relay's spool (`wait_settled`), so a relay killed
at any moment loses nothing the ranks were told it took: records still in its memory were not
acknowledged, and the rank re-sends them (duplicates, at-least-once). The wait is bounded
(ACK_WAIT_S, past the Kafka export timeout); an acknowledgement sent at that bound (`acks_unsettled`)
and every acknowledgement with durable acks off (acked once queued: lower latency for the rank's
export thread) reopen the window: records acknowledged but not yet produced die with the relay,
at most `relay_flush_interval_s` plus one export of them, bounded by the queue (max_queue records).
A clean stop (SIGTERM: `stop()` then the emitter's close) loses nothing: what Kafka did not take is spooled.

Control: a connection whose first frame is a subscription (framing.SUBSCRIBE) is a rank asking for
its control commands; with a NodeControl the relay registers it with the hub (producers/relay/control.py),
without one it closes it (the rank keeps retrying; run both with the same STEPLENS_RELAY_CONTROL).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from infra.settings import Settings
from producers.emitter import BackgroundEmitter
from producers.exporter import KafkaExporter, OutRecord
from producers.relay.framing import (
    ACK,
    HEADER,
    MAX_ACCEPTED_FRAME_BYTES,
    MAX_HELLO_BYTES,
    SUBSCRIBE,
    SUBSCRIBED,
    FrameError,
    decode_body,
    decode_hello,
)
from schemas import Topics

if TYPE_CHECKING:
    from producers.relay.control import NodeControl

log = logging.getLogger(__name__)

UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its terminating NUL
# Longest wait for a frame's records to be in Kafka or the spool before acknowledging anyway: past the
# Kafka export timeout (10 s) plus a flush interval, under the rank's wait for the answer (RelayExporter).
ACK_WAIT_S = 20.0


class RecordSink(Protocol):
    """What the relay needs from BackgroundEmitter."""

    def emit_records_seq(self, records: list[OutRecord], *, send_now: bool = False) -> tuple[int, int]: ...

    def wait_settled(self, seq: int, timeout: float | None) -> bool: ...


@dataclass(frozen=True, slots=True)
class RelayStats:
    """connections: accepted so far; frames/records: received; forwarded: records the sink took;
    refused: records handed back (sink full); protocol_errors: connections closed on a bad frame;
    subscriptions: control subscriptions accepted; subscriptions_refused: closed (the relay has no control);
    acks_unsettled: frames acknowledged at ACK_WAIT_S with records not yet in Kafka nor the spool."""

    connections: int = 0
    frames: int = 0
    records: int = 0
    forwarded: int = 0
    refused: int = 0
    protocol_errors: int = 0
    subscriptions: int = 0
    subscriptions_refused: int = 0
    acks_unsettled: int = 0


def _recv_into_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill `view`; False on a clean EOF before the first byte (the peer left between frames)."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return False
            raise ConnectionError("peer closed mid-frame")
        got += n
    return True


class Relay:
    """Listens on `path`; one thread per connected rank; `stop()` closes everything.

    `control`: the node's control loop, started and stopped with the relay (None: no subscriptions).
    `durable_ack`: acknowledge a frame once its records are in Kafka or the spool (else once queued).
    """

    def __init__(self, path: Path, sink: RecordSink, *, max_frame_bytes: int = MAX_ACCEPTED_FRAME_BYTES,
                 control: NodeControl | None = None, durable_ack: bool = True, ack_wait_s: float = ACK_WAIT_S) -> None:
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise ValueError(f"relay socket path longer than {UNIX_PATH_MAX} bytes: {path}")
        self.path = path
        self.sink = sink
        self.max_frame_bytes = max_frame_bytes
        self.control = control
        self.durable_ack = durable_ack
        self.ack_wait_s = ack_wait_s
        self._lock = threading.Lock()
        self._counts = {"connections": 0, "frames": 0, "records": 0, "forwarded": 0, "refused": 0,
                        "protocol_errors": 0, "subscriptions": 0, "subscriptions_refused": 0,
                        "acks_unsettled": 0}
        self._listener: socket.socket | None = None
        self._conns: dict[int, socket.socket] = {}
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                self._counts[k] += v

    def stats(self) -> RelayStats:
        with self._lock:
            return RelayStats(**self._counts)

    def start(self) -> Relay:
        """Bind (replacing a stale socket file, refusing one a live relay holds) and start accepting."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink()  # nobody listens: a crashed relay's leftover
            else:
                raise RuntimeError(f"another relay is listening on {self.path}")
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is the owner's only (ranks run as the same user)
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        listener.listen(64)
        self._listener = listener
        t = threading.Thread(target=self._accept_loop, name="steplens-relay-accept", daemon=True)
        self._threads.append(t)
        t.start()
        if self.control is not None:
            self.control.start()
        return self

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                log.warning("relay accept failed", exc_info=True)
                continue
            with self._lock:
                self._counts["connections"] += 1
                self._conns[conn.fileno()] = conn
                t = threading.Thread(target=self._serve, args=(conn,), name="steplens-relay-conn", daemon=True)
                self._threads = [x for x in self._threads if x.is_alive()]
                self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        header = bytearray(HEADER.size)
        try:
            while not self._stopping.is_set():
                if not _recv_into_exact(conn, memoryview(header)):
                    return
                body_len, count = HEADER.unpack(header)
                if count == SUBSCRIBE:
                    self._subscribe(conn, body_len)
                    return
                if body_len > self.max_frame_bytes:
                    raise FrameError(f"frame of {body_len} bytes over the relay's limit")
                body = bytearray(body_len)
                if body_len and not _recv_into_exact(conn, memoryview(body)):
                    raise ConnectionError("peer closed mid-frame")
                records = decode_body(body, count)
                accepted, seq = self.sink.emit_records_seq(records) if records else (0, 0)
                unsettled = accepted > 0 and self.durable_ack and not self.sink.wait_settled(seq, self.ack_wait_s)
                self._count(frames=1, records=len(records), forwarded=accepted, refused=len(records) - accepted,
                            acks_unsettled=int(unsettled))
                conn.sendall(ACK.pack(accepted))
        except FrameError:
            self._count(protocol_errors=1)
            log.warning("relay closed a connection on a malformed frame", exc_info=True)
        except OSError:
            log.debug("relay connection ended", exc_info=True)
        finally:
            with self._lock:
                self._conns.pop(fd, None)
            conn.close()

    def _subscribe(self, conn: socket.socket, body_len: int) -> None:
        """A rank's control connection: register it with the hub until it (or the relay) goes away."""
        if body_len > MAX_HELLO_BYTES:
            raise FrameError(f"subscription of {body_len} bytes")
        body = bytearray(body_len)
        if not _recv_into_exact(conn, memoryview(body)):
            raise ConnectionError("peer closed mid-frame")
        hello = decode_hello(body)
        if self.control is None:
            self._count(subscriptions_refused=1)
            return
        from producers.relay.control import Subscriber

        sub = Subscriber(conn, hello)
        self.control.hub.add(sub, greeting=SUBSCRIBED)
        self._count(subscriptions=1)
        try:
            while conn.recv(4096):  # a subscriber only listens: anything it sends ends the subscription
                self._count(protocol_errors=1)
                return
        finally:
            self.control.hub.remove(sub)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, end every connection (ranks then spool) and remove the socket file."""
        self._stopping.set()
        if self.control is not None:
            self.control.stop(timeout)
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns = list(self._conns.values())
            threads = list(self._threads)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def relay_from_settings(settings: Settings, sink: RecordSink, topics: Topics, path: Path | None = None) -> Relay:
    """The node relay as configured: durable acks and control per settings (not started)."""
    from producers.relay.control import node_control

    return Relay(settings.relay_path if path is None else path, sink, control=node_control(settings, topics),
                 durable_ack=settings.relay_durable_ack)


def relay_emitter(settings: Settings, topics: Topics, *, name: str = "steplens-relay",
                  max_queue: int = 50_000) -> BackgroundEmitter:
    """The node's one Kafka client: records forwarded as they came (already packed by the ranks)."""
    from infra.clients import kafka_client_config

    cfg = kafka_client_config(settings, "producer")
    bootstrap = cfg.pop("bootstrap_servers")
    # Resending (bounded exports): a frame is acknowledged once its records are in Kafka or the spool,
    # within ACK_WAIT_S; an in-place wait would hold a batch in memory for the whole outage.
    exporter = KafkaExporter(bootstrap, client_id=f"{name}-{os.getpid()}", extra_config=cfg, redelivery="resend")
    return BackgroundEmitter(exporter, topics, name=name, flush_interval_s=settings.relay_flush_interval_s,
                             max_queue=max_queue, pack=False, spool_root=settings.hook_spool_dir)


__all__ = ["ACK_WAIT_S", "UNIX_PATH_MAX", "RecordSink", "Relay", "RelayStats", "relay_emitter", "relay_from_settings"]
