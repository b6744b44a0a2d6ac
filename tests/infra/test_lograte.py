"""The rate-limit filter: bursts pass, floods are cut, suppressed counts are reported."""

from __future__ import annotations

import logging

from infra.lograte import CLIENT_LOGGERS, RateLimitFilter, install_rate_limit


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _record(name: str, msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_flood_of_one_template_passes_a_burst_and_reports_the_rest() -> None:
    clock = _Clock()
    filt = RateLimitFilter(burst=3, period_s=10.0, clock=clock)
    passed = [filt.filter(_record("kafka.conn", "connect to %s failed", f"10.0.0.{i}")) for i in range(9000)]
    assert sum(passed) == 3
    assert filt.suppressed_total == 8997
    clock.t = 10.5
    rec = _record("kafka.conn", "connect to %s failed", "x")
    assert filt.filter(rec)
    assert "8997 similar messages suppressed" in rec.getMessage()


def test_templates_and_loggers_are_limited_separately_and_critical_always_passes() -> None:
    filt = RateLimitFilter(burst=1, period_s=10.0, clock=_Clock())
    assert filt.filter(_record("kafka.conn", "a"))
    assert filt.filter(_record("kafka.conn", "b"))
    assert filt.filter(_record("aiokafka", "a"))
    assert not filt.filter(_record("kafka.conn", "a"))
    assert filt.filter(_record("kafka.conn", "a", level=logging.CRITICAL))


def test_prefixes_leave_other_loggers_alone() -> None:
    filt = RateLimitFilter(burst=1, period_s=10.0, prefixes=("kafka",), clock=_Clock())
    assert all(filt.filter(_record("streams.detect.app", "incident %s", i)) for i in range(100))
    assert filt.filter(_record("kafka.net", "x"))
    assert not filt.filter(_record("kafka.net", "x"))
    assert filt.filter(_record("kafkaesque", "x"))  # a prefix is a logger name, not a string prefix


def _remove_installed() -> None:
    root = logging.getLogger()
    for target in [root, *root.handlers, *(logging.getLogger(n) for n in CLIENT_LOGGERS)]:
        for f in list(target.filters):
            if isinstance(f, RateLimitFilter):
                target.removeFilter(f)


def test_installed_filter_cuts_a_client_flood_at_the_root_handler() -> None:
    _remove_installed()  # e.g. a Kafka exporter built by an earlier test installed one
    root = logging.getLogger()
    handler = logging.StreamHandler()
    records: list[logging.LogRecord] = []
    handler.emit = records.append  # type: ignore[method-assign]
    root.addHandler(handler)
    client = logging.getLogger("aiokafka")
    level = client.level
    client.setLevel(logging.NOTSET)  # the CLI quiets the clients' loggers (an earlier test may have run it)
    try:
        filt = install_rate_limit(burst=2, period_s=60.0)
        assert install_rate_limit() is filt  # idempotent
        child = logging.getLogger("aiokafka.conn.deep")
        child.propagate = True
        for _ in range(1000):
            child.error("Unable connect to %s", "127.0.0.1:1")
        ours = logging.getLogger("steplens.test")
        for i in range(10):
            ours.error("alert %d", i)
        assert sum(r.name == "aiokafka.conn.deep" for r in records) == 2
        assert sum(r.name == "steplens.test" for r in records) == 10
    finally:
        client.setLevel(level)
        root.removeHandler(handler)
        _remove_installed()
