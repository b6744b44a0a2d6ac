import logging

import orjson
import pytest

from streams.records import DomainStep, GroupStep
from streams.skips import SkipLog, excerpt, typed_record
from tests.streams.helpers import domain_record


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


def _group_step() -> GroupStep:
    return GroupStep(job="j", domain="dp", group=0, size=4, world=8, step=3, reported=4, missing=0, start_ns=1,
                     end_ns=2, step_ms=1.0, busy_max_ms=1.0, busy_median_ms=1.0, busy_mean_ms=1.0, wait_ratio=0.1,
                     slowest_rank=2, slowest_host="h", slowest_z=3.0, flagged=True, slowest_excess_phase=None,
                     phase_max={"gc_ms": 1.0}, phase_mean={"gc_ms": 0.5})


def test_internal_records_round_trip_through_the_type_check() -> None:
    record = domain_record(1, 2, 300.0)
    assert typed_record(DomainStep, orjson.loads(record.dumps())) == record
    group = _group_step()
    data = {k: v for k, v in orjson.loads(group.dumps()).items() if k != "kind"}
    assert typed_record(GroupStep, data) == group


@pytest.mark.parametrize("change", [
    {"step": "3"}, {"step": 2**64 - 1}, {"flagged": 1}, {"wait_ratio": None}, {"slowest_host": 5},
    {"phase_max": {"gc_ms": "x"}}, {"phase_max": []}, {"slowest_excess_phase": 1}, {"extra": 1},
    {"job": "j" * 10_000}, {"size": True},
])
def test_internal_records_of_the_wrong_shape_are_refused(change: dict[str, object]) -> None:
    data = {k: v for k, v in orjson.loads(_group_step().dumps()).items() if k != "kind"}
    with pytest.raises(TypeError):
        typed_record(GroupStep, {**data, **change})


@pytest.mark.parametrize("data", [None, [], "x", 1])
def test_internal_records_must_be_objects(data: object) -> None:
    with pytest.raises(TypeError):
        typed_record(DomainStep, data)
