"""Rank side of the node relay: an Exporter that writes records to the relay's Unix socket.

Runs on the emitter's export thread only (never the training thread). Each export sends the batch
as frames (connect and send bounded by `timeout_s`) and waits for the relay's count of accepted
records (bounded by `ack_timeout_s`: with durable acks the relay answers once the records are in
Kafka or its spool, which may take up to its Kafka export timeout; meanwhile the emitter keeps
spooling what overflows its queue, as with a slow broker). Any failure
(no relay, refused connection, a full socket buffer past the timeout, a broken pipe, a relay whose
queue is full) raises ExportError naming the records not accepted, so the emitter spools them and
retries with backoff, exactly as when Kafka is down. Delivery is at-least-once: a frame whose answer
is lost (the relay died after reading it) is sent again.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path

from producers.exporter import ExportError, OutRecord
from producers.relay.framing import ACK, MAX_FRAME_BYTES, encode_frame, split_frames
from producers.relay.server import ACK_WAIT_S

log = logging.getLogger(__name__)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("relay closed the connection")
        buf += chunk
    return bytes(buf)


class RelayExporter:
    """Sends records to the node relay at `path` (connects lazily, reconnects after any failure)."""

    def __init__(self, path: Path | str, *, timeout_s: float = 2.0, ack_timeout_s: float = ACK_WAIT_S + 10.0,
                 max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.path = str(path)
        self.timeout_s = timeout_s
        self.ack_timeout_s = max(ack_timeout_s, timeout_s)
        self.max_frame_bytes = max_frame_bytes
        self._sock: socket.socket | None = None
        self._closed = False

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout_s)
                sock.connect(self.path)
            except BaseException:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def _discard(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                log.debug("closing the relay socket raised", exc_info=True)

    def export(self, records: Sequence[OutRecord]) -> None:
        if self._closed:
            raise ExportError("relay exporter is closed")
        if not records:
            return
        try:
            sock = self._connect()
        except OSError as exc:
            raise ExportError(f"no relay at {self.path}: {exc}") from exc
        done = 0
        for frame in split_frames(records, self.max_frame_bytes):
            try:
                sock.settimeout(self.timeout_s)
                sock.sendall(encode_frame(frame))
                sock.settimeout(self.ack_timeout_s)
                (accepted,) = ACK.unpack(_recv_exact(sock, ACK.size))
            except OSError as exc:  # timeouts, EPIPE, ECONNRESET, EOF
                self._discard()
                raise ExportError(f"relay at {self.path} failed: {exc}", failed=records[done:]) from exc
            done += min(accepted, len(frame))
            if accepted < len(frame):
                raise ExportError(f"relay queue full: {len(records) - done} of {len(records)} records refused",
                                  failed=records[done:])

    def flush(self, timeout: float) -> bool:
        return True  # export returns only once the relay took the records

    def close(self) -> None:
        self._closed = True
        self._discard()


__all__ = ["RelayExporter"]
