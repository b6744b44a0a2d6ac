"""Skipping bad input with a reason: counted always, logged at a bounded rate, quoted.

A worker that reads a topic anyone can write to must survive whatever arrives there. One
crafted message per second must not become one log line per second either (nor forge log
lines: the reason and the input's excerpt are logged with %r, so newlines stay escaped).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from schemas.bounds import int_range, max_chars

EXCERPT_BYTES = 80


def excerpt(raw: object) -> bytes | str | None:
    """The first bytes of an input, for a log line."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw[:EXCERPT_BYTES])
    if isinstance(raw, str):
        return raw[:EXCERPT_BYTES]
    return None if raw is None else repr(raw)[:EXCERPT_BYTES]


class SkipLog:
    """Counts skipped inputs per topic; logs the first skip of each topic per `interval_s`."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._next_log: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.counts: dict[str, int] = {}

    def skip(self, topic: str, reason: str, raw: object = None) -> None:
        self.counts[topic] = self.counts.get(topic, 0) + 1
        now = self._clock()
        if now < self._next_log.get(topic, float("-inf")):
            self._suppressed[topic] = self._suppressed.get(topic, 0) + 1
            return
        self._next_log[topic] = now + self._interval
        suppressed = self._suppressed.pop(topic, 0)
        self._log.warning("skipped bad input on %r: %r (input starts %r; %d more skipped since the last line)",
                          topic, reason, excerpt(raw), suppressed)


T = TypeVar("T")


def _fits(value: object, tp: Any, name: str) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        low, high = int_range(name)
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if tp is str:
        return isinstance(value, str) and len(value) <= max_chars(name)
    if get_origin(tp) is dict:
        _, val_tp = get_args(tp)
        return isinstance(value, dict) and all(
            isinstance(k, str) and len(k) <= max_chars(name) and _fits(v, val_tp, name) for k, v in value.items()
        )
    args = get_args(tp)
    if type(None) in args:  # X | None
        return value is None or any(_fits(value, a, name) for a in args if a is not type(None))
    return False


def typed_record(cls: type[T], data: object) -> T:
    """Internal record `cls` (a dataclass of plain fields) from parsed JSON, each field's type checked.

    Internal topics are written by steplens' own workers, but anything that can reach the
    broker can write to them; a record of the wrong shape must be skipped, not stored in a
    window where it would break every later computation. Bounds are the contract's.
    """
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    hints = get_type_hints(cls)
    unknown = set(data) - set(hints)
    if unknown:
        raise TypeError(f"{cls.__name__}: unknown fields {sorted(unknown)[:5]!r}")
    for name, tp in hints.items():
        if name in data and not _fits(data[name], tp, name):
            raise TypeError(f"{cls.__name__}.{name}: {type(data[name]).__name__} does not fit {tp}")
    return cls(**data)
