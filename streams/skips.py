"""Skipping bad input with a reason: counted always, logged at a bounded rate, quoted.

A worker that reads a topic anyone can write to must survive whatever arrives there. One
crafted message per second must not become one log line per second either (nor forge log
lines: the reason and the input's excerpt are logged with %r, so newlines stay escaped).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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
