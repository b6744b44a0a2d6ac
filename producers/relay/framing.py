"""The relay's wire format: length-prefixed frames of records over a SOCK_STREAM Unix socket.

Why a stream and not SOCK_SEQPACKET/DGRAM: an AF_UNIX datagram must fit the sender's socket buffer
in one piece (net.core.wmem_max, ~208 KiB by default, and unprivileged processes cannot raise it),
but a packed record may be up to 1 MB; a stream takes any size, and one `sendall` carries a whole
export batch. The connection still tells each side when the other is gone (ECONNREFUSED, EPIPE, EOF).

A request frame is `!II` (body length, record count) then per record `!HiI` (topic length, key
length or -1 for no key, value length) and the three byte strings. The relay answers each frame
with `!I`: how many of its records, from the first, it accepted (the rest: its queue was full).

Control subscription (version 2, a separate connection): a request header whose record count is
SUBSCRIBE carries a JSON hello `{"job", "rank", "since_ms"}` instead of records. The relay answers
with pushes, each `!I` (body length) then the body: first an empty one (subscribed), then one per
control command naming that rank, `!iq` (the command record's partition and offset, so a rank can
drop a command it already got) then the command's JSON unchanged. A relay without control (or
older than this) closes the connection on a subscription; record connections are unchanged.
Pure: bytes in, records out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from producers.exporter import OutRecord

HEADER = struct.Struct("!II")
RECORD = struct.Struct("!HiI")
ACK = struct.Struct("!I")
# A rank splits its export batch into frames of at most this many bytes (one bigger record goes alone);
# the relay refuses (closes) a connection announcing a frame over MAX_ACCEPTED_FRAME_BYTES.
MAX_FRAME_BYTES = 4 * 1024 * 1024
MAX_ACCEPTED_FRAME_BYTES = 64 * 1024 * 1024
SUBSCRIBE = 0xFFFFFFFF  # the record count of a control subscription's header
MAX_HELLO_BYTES = 4096
PUSH = struct.Struct("!I")
PUSH_META = struct.Struct("!iq")
SUBSCRIBED = PUSH.pack(0)  # the relay's answer to a subscription
MAX_PUSH_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Hello:
    """Who subscribes: commands of `job` naming `rank` (or no ranks), issued from `since_ms` on."""

    job: str
    rank: int
    since_ms: int


class FrameError(ValueError):
    """A frame that does not parse: the connection is out of step and must be closed."""


def record_size(rec: OutRecord) -> int:
    return RECORD.size + len(rec.topic) + (len(rec.key) if rec.key is not None else 0) + len(rec.value)


def encode_frame(records: Sequence[OutRecord]) -> bytes:
    """One request frame carrying `records` in order."""
    parts: list[bytes] = [b""]
    for rec in records:
        topic = rec.topic.encode()
        key = rec.key
        parts.append(RECORD.pack(len(topic), -1 if key is None else len(key), len(rec.value)))
        parts.append(topic)
        if key:
            parts.append(key)
        parts.append(rec.value)
    body_len = sum(len(p) for p in parts)
    parts[0] = HEADER.pack(body_len, len(records))
    return b"".join(parts)


def split_frames(records: Sequence[OutRecord], max_bytes: int = MAX_FRAME_BYTES) -> list[Sequence[OutRecord]]:
    """Consecutive slices of `records`, each encoding to at most `max_bytes` (or one record alone)."""
    out: list[Sequence[OutRecord]] = []
    start, size = 0, 0
    for i, rec in enumerate(records):
        n = record_size(rec)
        if i > start and size + n > max_bytes:
            out.append(records[start:i])
            start, size = i, 0
        size += n
    if start < len(records):
        out.append(records[start:])
    return out


def decode_body(body: bytes | bytearray | memoryview, count: int) -> list[OutRecord]:
    """The records of one frame's body (after its header)."""
    view = memoryview(body)
    out: list[OutRecord] = []
    pos = 0
    try:
        for _ in range(count):
            tlen, klen, vlen = RECORD.unpack_from(view, pos)
            pos += RECORD.size
            topic = bytes(view[pos:pos + tlen]).decode()
            pos += tlen
            key: bytes | None = None
            if klen >= 0:
                key = bytes(view[pos:pos + klen])
                pos += klen
            value = bytes(view[pos:pos + vlen])
            pos += vlen
            if len(value) != vlen or (key is not None and len(key) != klen):
                raise FrameError("frame body shorter than its records")
            out.append(OutRecord(topic, key, value))
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"malformed frame: {exc}") from exc
    if pos != len(view):
        raise FrameError(f"frame body has {len(view) - pos} stray bytes")
    return out


def encode_subscribe(hello: Hello) -> bytes:
    """The frame a rank sends (once, first) on its control connection."""
    body = orjson.dumps({"job": hello.job, "rank": hello.rank, "since_ms": hello.since_ms})
    return HEADER.pack(len(body), SUBSCRIBE) + body


def decode_hello(body: bytes | bytearray | memoryview) -> Hello:
    try:
        doc = orjson.loads(bytes(body))
        hello = Hello(job=doc["job"], rank=doc["rank"], since_ms=doc["since_ms"])
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise FrameError(f"malformed subscription: {exc}") from exc
    if not (isinstance(hello.job, str) and isinstance(hello.rank, int) and isinstance(hello.since_ms, int)):
        raise FrameError("malformed subscription: job must be a string, rank and since_ms integers")
    return hello


def encode_push(partition: int, offset: int, value: bytes) -> bytes:
    """One control command for a subscriber, with where it was read (for the rank's dedup)."""
    return PUSH.pack(PUSH_META.size + len(value)) + PUSH_META.pack(partition, offset) + value


def decode_push(body: bytes | bytearray | memoryview) -> tuple[int, int, bytes]:
    """(partition, offset, command JSON) of a non-empty push body."""
    if len(body) < PUSH_META.size:
        raise FrameError(f"push of {len(body)} bytes is shorter than its header")
    partition, offset = PUSH_META.unpack_from(body)
    return partition, offset, bytes(body[PUSH_META.size:])


__all__ = ["ACK", "HEADER", "MAX_ACCEPTED_FRAME_BYTES", "MAX_FRAME_BYTES", "MAX_HELLO_BYTES", "MAX_PUSH_BYTES", "PUSH",
           "SUBSCRIBE", "SUBSCRIBED", "FrameError", "Hello", "decode_body", "decode_hello", "decode_push",
           "encode_frame", "encode_push", "encode_subscribe", "record_size", "split_frames"]
