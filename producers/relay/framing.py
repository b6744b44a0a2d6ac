"""The relay's wire format: length-prefixed frames of records over a SOCK_STREAM Unix socket.

Why a stream and not SOCK_SEQPACKET/DGRAM: an AF_UNIX datagram must fit the sender's socket buffer
in one piece (net.core.wmem_max, ~208 KiB by default, and unprivileged processes cannot raise it),
but a packed record may be up to 1 MB; a stream takes any size, and one `sendall` carries a whole
export batch. The connection still tells each side when the other is gone (ECONNREFUSED, EPIPE, EOF).

A request frame is `!II` (body length, record count) then per record `!HiI` (topic length, key
length or -1 for no key, value length) and the three byte strings. The relay answers each frame
with `!I`: how many of its records, from the first, it accepted (the rest: its queue was full).
Pure: bytes in, records out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from producers.exporter import OutRecord

HEADER = struct.Struct("!II")
RECORD = struct.Struct("!HiI")
ACK = struct.Struct("!I")
# A rank splits its export batch into frames of at most this many bytes (one bigger record goes alone);
# the relay refuses (closes) a connection announcing a frame over MAX_ACCEPTED_FRAME_BYTES.
MAX_FRAME_BYTES = 4 * 1024 * 1024
MAX_ACCEPTED_FRAME_BYTES = 64 * 1024 * 1024


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


__all__ = ["ACK", "HEADER", "MAX_ACCEPTED_FRAME_BYTES", "MAX_FRAME_BYTES", "FrameError", "decode_body",
           "encode_frame", "record_size", "split_frames"]
