import logging

import pytest

from streams.skips import SkipLog, excerpt


def test_skips_are_all_counted_but_logged_at_a_bounded_rate_and_quoted(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    skips = SkipLog(logging.getLogger("test.skips"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.skips"):
        for i in range(1_000):
            now[0] = i * 0.01  # 1,000 bad inputs in 10 s
            skips.skip("t.steps", "field 'v': bad\nFORGED LINE", b"x" * 500)
        now[0] = 10.5
        skips.skip("t.steps", "again", None)
        skips.skip("t.jobs", "other topic", "text")
    assert skips.counts == {"t.steps": 1_001, "t.jobs": 1}
    assert len(caplog.records) == 3  # first per topic, then one per interval
    assert all("\n" not in r.getMessage() for r in caplog.records)
    assert "999 more skipped" in caplog.records[1].getMessage()


def test_excerpt_is_short_for_any_input() -> None:
    assert excerpt(b"y" * 10_000) == b"y" * 80
    assert excerpt(memoryview(b"abc")) == b"abc"
    assert excerpt(None) is None
    assert excerpt(12345) == "12345"
