"""Rate-limited logging: a broken broker must cost a few log lines a second, not thousands.

With Kafka down, aiokafka and kafka-python log every failed connection attempt at ERROR,
about 9,000 lines a second from one worker; that buries the one line that matters and
fills disks. `RateLimitFilter` lets through at most `burst` records per
(logger, message template) per `period_s`, drops the rest, and when the next period
lets a record through again it appends how many were suppressed in between, so nothing
is hidden silently. It keys on the *template* (`record.msg`), so "connect to 127.0.0.1
failed: %s" with different arguments counts as one kind of line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Loggers that flood while a broker or ClickHouse is away: the Kafka clients, Faust/mode and
# the land worker (one "landing failed" / "dead letter" line per batch or message).
CLIENT_LOGGERS = ("aiokafka", "kafka", "faust", "mode", "streams.land.worker", "sinks.lander")


_DECIDED = "_steplens_rate_limit"  # per-record memo: one decision however many handlers ask


@dataclass(slots=True)
class _Bucket:
    started: float
    passed: int = 0
    suppressed: int = 0


class RateLimitFilter(logging.Filter):
    """Pass at most `burst` records per (logger, template) every `period_s` seconds.

    Records at or above `always_level` (default: CRITICAL) always pass. The count of
    suppressed records is appended to the first record that passes in a later period.
    Thread-safe: kafka-python logs from its own threads.
    """

    def __init__(
        self,
        burst: int = 5,
        period_s: float = 10.0,
        always_level: int = logging.CRITICAL,
        prefixes: tuple[str, ...] | None = None,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if burst < 1 or period_s <= 0:
            raise ValueError("burst must be >= 1 and period_s > 0")
        self.burst = burst
        self.period_s = period_s
        self.always_level = always_level
        self._prefixes = prefixes
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.always_level:
            return True
        if self._prefixes is not None and not _under(record.name, self._prefixes):
            return True
        decided = getattr(record, _DECIDED, None)
        if isinstance(decided, bool):  # the same record through another handler sharing this filter
            return decided
        passed = self._decide(record)
        setattr(record, _DECIDED, passed)
        return passed

    def add_prefixes(self, prefixes: tuple[str, ...]) -> None:
        """Also limit these loggers (a second installer asked for more)."""
        if self._prefixes is not None:
            self._prefixes = tuple(dict.fromkeys(self._prefixes + prefixes))

    def _decide(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= self._max_keys:
                    self._evict(now)
                bucket = self._buckets[key] = _Bucket(now)
            elif now - bucket.started >= self.period_s:
                suppressed = bucket.suppressed
                bucket.started, bucket.passed, bucket.suppressed = now, 0, 0
                if suppressed:
                    record.msg = f"{record.msg} [{suppressed} similar messages suppressed in the last " \
                                 f"{self.period_s:.0f}s]"
            if bucket.passed < self.burst:
                bucket.passed += 1
                return True
            bucket.suppressed += 1
            self.suppressed_total += 1
            return False

    def _evict(self, now: float) -> None:
        """Forget expired buckets (or all, if none expired) so the key set stays bounded."""
        stale = [k for k, b in self._buckets.items() if now - b.started >= self.period_s]
        for k in stale or list(self._buckets):
            del self._buckets[k]


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def install_rate_limit(
    loggers: tuple[str, ...] = CLIENT_LOGGERS, burst: int = 5, period_s: float = 10.0
) -> RateLimitFilter:
    """Attach one shared filter to the named loggers and to every handler of the root logger.

    Filters on a logger only see records logged *on that logger*, not its children's, so the
    filter is also put on the root handlers, where every propagated record passes; there it
    limits only records of `loggers` and their children (our own alerts are never limited).
    Idempotent per logger/handler: an already installed RateLimitFilter is reused.
    """
    shared: RateLimitFilter | None = None
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in loggers]
    targets.extend(logging.getLogger().handlers)
    for target in targets:
        for existing in target.filters:
            if isinstance(existing, RateLimitFilter):
                shared = shared or existing
    if shared is None:
        shared = RateLimitFilter(burst=burst, period_s=period_s, prefixes=loggers)
    else:
        shared.add_prefixes(loggers)
    for target in targets:
        if not any(isinstance(f, RateLimitFilter) for f in target.filters):
            target.addFilter(shared)
    return shared
