"""A bounded on-disk FIFO of records, so a Kafka outage costs disk space instead of events.

Records are appended to numbered segment files (``000000000001.seg`` ...) as
``[u32 length][u32 crc32][payload]`` frames; the payload is the topic, the key and the value,
each length-prefixed. Replay reads from a cursor (segment, offset) that is persisted after each
consumed batch, so a restarted producer resumes where the last one stopped instead of sending
the spool twice. Fully consumed segments are deleted; an empty spool leaves no files behind.

One spool directory belongs to one process (one emitter); sharing it is not supported.
The spool is used only from the emitter's worker thread, so it takes no locks.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from producers.exporter import OutRecord

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">II")  # payload length, crc32 of payload
_TOPIC_LEN = struct.Struct(">H")
_KEY_LEN = struct.Struct(">i")  # -1: no key
SEGMENT_SUFFIX = ".seg"
CURSOR_FILE = "cursor"


def encode_record(rec: OutRecord) -> bytes:
    """One frame: header + payload (topic, key, value)."""
    topic = rec.topic.encode()
    key_len = -1 if rec.key is None else len(rec.key)
    payload = b"".join(
        (_TOPIC_LEN.pack(len(topic)), topic, _KEY_LEN.pack(key_len), rec.key or b"", rec.value)
    )
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes) -> OutRecord:
    (topic_len,) = _TOPIC_LEN.unpack_from(payload, 0)
    pos = _TOPIC_LEN.size
    topic = payload[pos:pos + topic_len].decode()
    pos += topic_len
    (key_len,) = _KEY_LEN.unpack_from(payload, pos)
    pos += _KEY_LEN.size
    key: bytes | None = None
    if key_len >= 0:
        key = payload[pos:pos + key_len]
        pos += key_len
    return OutRecord(topic, key, payload[pos:])


def iter_frames(buf: bytes, start: int = 0) -> Iterator[tuple[OutRecord | None, int]]:
    """(record, end offset) for each intact frame from `start`; (None, len) once at a torn/corrupt tail."""
    pos = start
    end = len(buf)
    while pos < end:
        if end - pos < _FRAME.size:
            yield None, end
            return
        length, crc = _FRAME.unpack_from(buf, pos)
        body_start = pos + _FRAME.size
        payload = buf[body_start:body_start + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            yield None, end
            return
        try:
            rec = _decode_payload(payload)
        except (struct.error, UnicodeDecodeError):
            yield None, end
            return
        pos = body_start + length
        yield rec, pos


LOCK_FILE = "lock"


def claim_directory(directory: Path) -> int | None:
    """Lock `directory` (created 0700) for this process: the lock's fd, or None if another process holds it.

    A spool directory must have one writer; default spool directories are shared by name
    between runs, so a second concurrent process must notice and use another one. The lock
    goes with the fd (close it, or the process exits).
    """
    import fcntl

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_default_spool(name: str, root: Path) -> tuple[Path, int] | None:
    """`<root>/<name>`, or `<root>/<name>-<pid>` when another live process holds it; with its lock fd.

    The caller passes the root (entry points: `Settings.hook_spool_dir`, $STEPLENS_HOME/spool): a
    library reads no settings of its own.
    """
    for directory in (root / name, root / f"{name}-{os.getpid()}"):
        fd = claim_directory(directory)
        if fd is not None:
            return directory, fd
    return None


def open_spool(name: str, spool_dir: Path | None, spool_root: Path | None,
               max_bytes: int) -> tuple[Spool | None, int | None]:
    """An emitter's spool (None: it runs without one) and the fd of its directory's lock (None: none held).

    `spool_dir` is used as given (one writer: a busy one is refused); `spool_root` claims
    `<spool_root>/<name>`, or `<name>-<pid>` when another live process holds it. An unusable or busy
    spool must not stop training: it is logged and the emitter runs without one. The lock is held
    until the emitter's worker stops (the caller closes the fd).
    """
    if spool_dir is not None and spool_root is not None:
        raise ValueError("give spool_dir or spool_root, not both")
    claimed: tuple[Path, int] | None = None
    if spool_root is not None:
        claimed = _claim_default(name, spool_root)
    elif spool_dir is not None:
        claimed = _claim_explicit(spool_dir)
    if claimed is None:
        return None, None
    directory, lock = claimed
    try:
        return Spool(directory, max_bytes), lock
    except OSError:  # an unusable spool directory must not stop training: run without one
        log.warning("steplens spool at %s unusable; failed exports will be dropped", directory, exc_info=True)
        return None, lock


def _claim_default(name: str, root: Path) -> tuple[Path, int] | None:
    try:
        claimed = claim_default_spool(name, root)
    except Exception:  # no usable state directory: run without a spool, as documented
        log.warning("steplens default spool unusable; failed exports will be dropped", exc_info=True)
        return None
    if claimed is None:
        log.warning("steplens spool directories for %r are busy; failed exports will be dropped", name)
        return None
    return claimed


def _claim_explicit(directory: Path) -> tuple[Path, int] | None:
    """The given spool directory, once this emitter is its one writer: two emitters on one spool
    read and delete each other's segments (two soak jobs given one directory lost events:
    "spool unreadable"). A busy one is refused loudly and the emitter runs without a spool."""
    try:
        fd = claim_directory(Path(directory))
    except OSError:
        log.warning("steplens spool at %s unusable; failed exports will be dropped", directory, exc_info=True)
        return None
    if fd is None:
        log.error("steplens spool at %s is in use by another emitter; this one runs without a spool "
                  "(failed exports will be dropped): give each emitter its own spool_dir", directory)
        return None
    return Path(directory), fd


@dataclass(frozen=True, slots=True)
class _Pos:
    seq: int
    offset: int


class Spool:
    """FIFO of OutRecords in segment files under `directory`, at most `max_bytes` on disk."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        *,
        segment_bytes: int | None = None,
        fsync: bool = False,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 * 1024, min(4 * 1024 * 1024, max_bytes // 8))
        self.fsync = fsync
        self.corrupt_tails = 0  # segments whose tail was unreadable (records lost, count unknown)
        # Owner-only: spooled events are job telemetry (hosts, timings) like the data they replay.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.directory.stat().st_uid == os.geteuid():
            self.directory.chmod(0o700)
        self._segments: list[int] = []
        self._sizes: dict[int, int] = {}
        self._cursor = _Pos(0, 0)
        self._pending = 0
        # End position of each frame the last peek walked over; False marks a skipped corrupt tail.
        self._peeked: list[tuple[_Pos, bool]] = []
        self._roll = False  # start a new segment on the next append (never write after a torn tail)
        self._recover()

    # --- state -------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Records appended and not yet consumed."""
        return self._pending

    @property
    def bytes(self) -> int:
        """Bytes on disk (consumed bytes of the head segment count until it is deleted)."""
        return sum(self._sizes.values())

    @property
    def empty(self) -> bool:
        return self._pending == 0

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:012d}{SEGMENT_SUFFIX}"

    def _recover(self) -> None:
        """Pick up segments a previous process left behind (after a crash or an outage at exit)."""
        seqs = sorted(
            int(p.name[: -len(SEGMENT_SUFFIX)])
            for p in self.directory.glob(f"*{SEGMENT_SUFFIX}")
            if p.name[: -len(SEGMENT_SUFFIX)].isdigit()
        )
        cursor = self._read_cursor()
        for seq in seqs:
            if cursor is not None and seq < cursor.seq:
                self._path(seq).unlink(missing_ok=True)
                continue
            self._segments.append(seq)
            self._sizes[seq] = self._path(seq).stat().st_size
        if not self._segments:
            self._cursor = _Pos(1, 0)
            self._remove_cursor()
            return
        head = self._segments[0]
        offset = cursor.offset if cursor is not None and cursor.seq == head else 0
        self._cursor = _Pos(head, offset)
        for seq in self._segments:
            buf = self._path(seq).read_bytes()
            start = offset if seq == head else 0
            for rec, _ in iter_frames(buf, start):
                if rec is None:
                    self.corrupt_tails += 1
                    break
                self._pending += 1
        self._roll = True
        if self._pending == 0:
            self._reset()

    def _read_cursor(self) -> _Pos | None:
        try:
            seq_s, off_s = (self.directory / CURSOR_FILE).read_text().split()
            return _Pos(int(seq_s), int(off_s))
        except (OSError, ValueError):
            return None

    def _write_cursor(self) -> None:
        tmp = self.directory / f"{CURSOR_FILE}.tmp"
        tmp.write_text(f"{self._cursor.seq} {self._cursor.offset}\n")
        os.replace(tmp, self.directory / CURSOR_FILE)

    def _remove_cursor(self) -> None:
        (self.directory / CURSOR_FILE).unlink(missing_ok=True)

    def _reset(self) -> None:
        """Drop every file: the spool is empty."""
        for seq in self._segments:
            self._path(seq).unlink(missing_ok=True)
        next_seq = (self._segments[-1] + 1) if self._segments else max(self._cursor.seq, 1)
        self._segments = []
        self._sizes = {}
        self._pending = 0
        self._peeked = []
        self._cursor = _Pos(next_seq, 0)
        self._remove_cursor()

    # --- writing -----------------------------------------------------------------------
    def append(self, records: Sequence[OutRecord]) -> int:
        """Append records in order until the byte bound is hit; return how many were stored.

        On an I/O error nothing of this call is kept (the partial write is truncated away).
        """
        frames: list[bytes] = []
        size = self.bytes
        for rec in records:
            frame = encode_record(rec)
            if size + len(frame) > self.max_bytes:
                break
            frames.append(frame)
            size += len(frame)
        if not frames:
            return 0
        if self._roll or not self._segments or self._sizes[self._segments[-1]] >= self.segment_bytes:
            self._roll = False
            seq = (self._segments[-1] + 1) if self._segments else self._cursor.seq
            if not self._segments:
                self._cursor = _Pos(seq, 0)
            self._segments.append(seq)
            self._sizes[seq] = 0
        seq = self._segments[-1]
        path = self._path(seq)
        before = self._sizes[seq]
        data = b"".join(frames)
        try:
            with open(path, "ab") as fh:
                fh.write(data)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
        except OSError:
            log.warning("spool write to %s failed", path, exc_info=True)
            try:
                with open(path, "r+b") as fh:
                    fh.truncate(before)
            except OSError:
                pass
            if before == 0 and len(self._segments) > 1:
                self._segments.pop()
                del self._sizes[seq]
            elif before == 0 and self._pending == 0:
                self._reset()
            return 0
        self._sizes[seq] = before + len(data)
        self._pending += len(frames)
        return len(frames)

    # --- reading -----------------------------------------------------------------------
    def peek(self, max_records: int) -> list[OutRecord]:
        """The oldest records (up to `max_records`) without consuming them."""
        out: list[OutRecord] = []
        self._peeked = []
        pos = self._cursor
        for seq in self._segments:
            if len(out) >= max_records:
                break
            if seq < pos.seq:
                continue
            start = pos.offset if seq == pos.seq else 0
            with open(self._path(seq), "rb") as fh:
                fh.seek(start)
                buf = fh.read()
            for rec, end in iter_frames(buf):
                if rec is None:
                    # Unreadable tail: treat the rest of the segment as consumed.
                    self.corrupt_tails += 1
                    self._peeked.append((_Pos(seq, start + end), False))
                    break
                out.append(rec)
                self._peeked.append((_Pos(seq, start + end), True))
                if len(out) >= max_records:
                    break
        return out

    def consume(self, count: int) -> None:
        """Forget the first `count` records of the last peek (they were delivered)."""
        if count <= 0:
            return
        taken = 0
        new_pos = self._cursor
        for pos, is_record in self._peeked:
            if is_record and taken >= count:
                break
            new_pos = pos  # corrupt-tail markers right after the last record are skipped too
            taken += is_record
        self._pending = max(self._pending - count, 0)
        self._peeked = []
        self._cursor = new_pos
        if self._pending == 0:
            self._reset()
            return
        while self._segments and self._segments[0] < self._cursor.seq:
            seq = self._segments.pop(0)
            self._sizes.pop(seq, None)
            self._path(seq).unlink(missing_ok=True)
        head = self._segments[0]
        if self._cursor.offset >= self._sizes[head] and len(self._segments) > 1:
            self._segments.pop(0)
            self._sizes.pop(head, None)
            self._path(head).unlink(missing_ok=True)
            self._cursor = _Pos(self._segments[0], 0)
        self._write_cursor()
