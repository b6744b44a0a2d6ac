"""Incremental reader of a Chrome-trace event array: multi-GB traces in bounded memory.

Why not ijson: its pure-Python backend parses ~1-3 MB/s. Here the file is read in chunks,
cut at candidate event boundaries (`}` `,` `{`) and each run of whole events is handed to
orjson as one array. A candidate inside a string or a nested object makes the slice invalid
JSON (unbalanced braces or an open string), so orjson rejects it and the previous candidate
is tried: a slice that parses is always made of whole top-level events. Memory is bounded by
the chunk size plus the largest event.

Handles both layouts: an object with a `traceEvents` array (Kineto; other keys may come
before or after the array) and a bare top-level array (Ascend trace_view.json).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson

CHUNK_BYTES = 8 << 20
MAX_CANDIDATES = 64
MAX_BUFFER_BYTES = 512 << 20

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class TraceFormatError(ValueError):
    """The file is not a readable trace (truncated, corrupt, not JSON); the message says where."""


class NotATraceError(TraceFormatError):
    """The file holds no event array at all: some other JSON, not a damaged trace (a folder walk skips it)."""


GZIP_MAGIC = b"\x1f\x8b"


def open_trace(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it is gzip by its first two bytes (whatever its name: users
    rename traces, and a `.json` may be compressed or a `.gz` not)."""
    with path.open("rb") as fh:
        gzipped = fh.read(2) == GZIP_MAGIC
    if gzipped:
        return cast(IO[bytes], gzip.open(path, "rb"))
    return path.open("rb")


TRACE_SNIFF_BYTES = 1 << 20  # a Kineto header (device properties, distributed info) comes before its events
_ARRAY_OF_OBJECTS = re.compile(rb"\A\s*\[\s*\{")


def looks_like_trace(path: Path) -> bool:
    """A trace under any name (`rank0.dat`, `trace` with no suffix), told by its first bytes: an event array,
    or an object whose `traceEvents` key comes in its first MiB. Users rename dumps when they collect them;
    a folder walk must not skip them for their name (the reader still judges the whole content)."""
    try:
        with open_trace(path) as fh:
            head = fh.read(TRACE_SNIFF_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return bool(_ARRAY_OF_OBJECTS.match(head)) or (head.lstrip()[:1] == b"{" and _EVENTS_KEY.search(head) is not None)


class EventStream:
    """Iterate batches (lists of event dicts) of one trace file; `header` fills as it is read.

    `progress(bytes_read)` is called after each chunk (raw bytes of the file, not decompressed).
    """

    def __init__(
        self, path: Path, chunk_bytes: int | None = None, progress: Callable[[int], None] | None = None
    ) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes if chunk_bytes is not None else CHUNK_BYTES
        self.progress = progress
        self.header: dict[str, Any] = {}
        self.events = 0

    def _raw_position(self, fh: IO[bytes]) -> int:
        inner = getattr(fh, "fileobj", None)
        try:
            return int(inner.tell()) if inner is not None else int(fh.tell())
        except (OSError, ValueError):
            return 0

    def batches(self) -> Iterator[list[dict[str, Any]]]:
        try:
            with open_trace(self.path) as fh:
                yield from self._batches(fh)
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            raise TraceFormatError(f"{self.path}: cannot read ({exc}) after {self.events} events") from exc

    def raw_slices(self) -> Iterator[bytes | list[dict[str, Any]]]:
        """Unvalidated runs of whole events (bytes to wrap in [ ] and parse elsewhere), then the parsed
        end of the array as one list. A cut inside a string makes its slice fail to parse: the caller
        then reads the file again with `batches()`, which validates every cut."""
        try:
            with open_trace(self.path) as fh:
                yield from self._raw_slices(fh)
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            raise TraceFormatError(f"{self.path}: cannot read ({exc})") from exc

    def _raw_slices(self, fh: IO[bytes]) -> Iterator[bytes | list[dict[str, Any]]]:
        buf = self._start(fh)
        while True:
            more = self._read(fh)
            if not more:
                break
            buf += more
            end = len(buf)
            while True:
                pos = buf.rfind(b"}", 0, end)
                if pos < 0:
                    break
                match = _BOUNDARY.match(buf, pos)
                if match is not None:
                    yield buf[: pos + 1]
                    buf = buf[match.end() - 1:]
                    break
                end = pos
            if len(buf) > MAX_BUFFER_BYTES:
                raise TraceFormatError(f"{self.path}: cannot split events near event {self.events}")
        yield from self._finish(buf)

    def _start(self, fh: IO[bytes]) -> bytes:
        """Read up to the start of the event array; returns what follows the `[`."""
        buf = self._read(fh)
        while True:
            stripped = buf.lstrip()
            if stripped[:1] == b"[":
                return stripped[1:]
            match = _EVENTS_KEY.search(buf)
            if match is not None:
                self._parse_prefix(buf[: match.start()])
                return buf[match.end():]
            more = self._read(fh)
            if not more or len(buf) > MAX_BUFFER_BYTES:
                raise NotATraceError(f"{self.path}: no trace event array (traceEvents) found")
            buf += more

    def _read(self, fh: IO[bytes]) -> bytes:
        data = fh.read(self.chunk_bytes)
        if self.progress is not None:
            self.progress(self._raw_position(fh))
        return data

    def _batches(self, fh: IO[bytes]) -> Iterator[list[dict[str, Any]]]:
        buf = self._start(fh)
        eof = False
        while True:
            cut = self._split(buf)
            if cut is not None:
                events, rest = cut
                buf = rest
                self.events += len(events)
                yield events
                continue
            if eof:
                break
            more = self._read(fh)
            if not more:
                eof = True
            elif len(buf) > MAX_BUFFER_BYTES:
                raise TraceFormatError(f"{self.path}: cannot split events near event {self.events}")
            buf += more
        yield from self._finish(buf)

    def _parse_prefix(self, prefix: bytes) -> None:
        body = prefix.strip()
        if not body:
            return
        body = body.rstrip(b",")
        if body.startswith(b"{"):
            body = body + b"}"
        try:
            head = orjson.loads(body)
        except orjson.JSONDecodeError:
            return  # keys before traceEvents are optional metadata
        if isinstance(head, dict):
            self.header.update(head)

    def _split(self, buf: bytes) -> tuple[list[dict[str, Any]], bytes] | None:
        """Whole events at the front of buf and the remainder starting at the next event's `{`."""
        if len(buf) < 2:
            return None
        end = len(buf)
        for _ in range(MAX_CANDIDATES):
            pos = buf.rfind(b"}", 0, end)
            if pos < 0:
                return None
            match = _BOUNDARY.match(buf, pos)
            end = pos
            if match is None:
                continue
            try:
                events = orjson.loads(b"[" + buf[: pos + 1] + b"]")
            except orjson.JSONDecodeError:
                continue
            return events, buf[match.end() - 1:]
        return None

    def _finish(self, buf: bytes) -> Iterator[list[dict[str, Any]]]:
        stripped = buf.strip()
        if stripped[:1] == b"]":  # empty array
            self._parse_tail(stripped[1:])
            return
        for match in _ARRAY_END.finditer(buf):
            try:
                events = orjson.loads(b"[" + buf[: match.start() + 1] + b"]")
            except orjson.JSONDecodeError:
                continue
            self.events += len(events)
            yield events
            self._parse_tail(buf[match.end():])
            return
        if self.events == 0:
            try:
                orjson.loads(b"[" + stripped)
            except orjson.JSONDecodeError:
                pass
            else:  # a whole JSON array, of numbers or strings: some other file, not a damaged trace
                raise NotATraceError(f"{self.path}: a JSON array without trace event objects")
        raise TraceFormatError(
            f"{self.path}: truncated or corrupt: the event array is not closed after {self.events} events"
        )

    def _parse_tail(self, tail: bytes) -> None:
        body = tail.strip()
        if not body or body == b"}":
            return
        if body.startswith(b","):
            body = b"{" + body[1:]
        try:
            rest = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"{self.path}: corrupt after the event array ({exc})") from exc
        if isinstance(rest, dict):
            self.header.update(rest)
