"""The throughput bench's pure parts: per-stage ratios to the ceiling and the --find-max climb.

The climb is driven by a stand-in pass/fail function (a machine that holds up to a known size),
so the sizes tried and the answer are known by construction; no broker runs here.
"""

from __future__ import annotations

import pytest

from bench.throughput import Job, find_max, next_size, stage_ratios


def test_stage_ratio_is_ceiling_us_over_stage_us() -> None:
    # ceiling 125,000 events/s = 8 µs/event; detect 16 µs -> 0.5, land 4 µs -> 2.0 (cheaper than the ceiling)
    r = stage_ratios(125_000.0, {"producer": 5.0, "detect": 16.0, "land": 4.0, "broker": 3.0})
    assert r == {"detect": pytest.approx(0.5), "land": pytest.approx(2.0)}


def test_stage_ratio_is_the_same_on_a_machine_twice_as_fast() -> None:
    slow = stage_ratios(100_000.0, {"detect": 30.0, "land": 25.0})
    fast = stage_ratios(200_000.0, {"detect": 15.0, "land": 12.5})
    assert slow == fast


def test_stage_ratio_is_none_without_a_ceiling_or_a_stage() -> None:
    assert stage_ratios(0.0, {"detect": 10.0, "land": 10.0}) == {"detect": None, "land": None}
    assert stage_ratios(100_000.0, {"detect": 0.0}) == {"detect": None, "land": None}


def test_next_size_grows_by_the_factor_in_whole_jobs() -> None:
    assert next_size(10_240) == 12_800
    assert next_size(512) == 640
    assert next_size(640) == 800
    assert next_size(800) == 1_008  # 1,000 rounded up to a multiple of tp*pp = 16
    assert next_size(4, 1.01) == 8  # never stands still
    for size in (512, 640, 800, 1_008, 10_240, 12_800):
        assert Job("j", next_size(size)).world == next_size(size)  # the size asked is the size run


def test_find_max_climbs_until_the_first_failure() -> None:
    asked: list[int] = []

    def holds_up_to_1000(ranks: int) -> bool:
        asked.append(ranks)
        return ranks <= 1_000

    res = find_max(holds_up_to_1000, 512)
    assert asked == [512, 640, 800, 1_008]
    assert res["max_ranks"] == 800
    assert res["tried"] == [{"ranks": 512, "passed": True}, {"ranks": 640, "passed": True},
                            {"ranks": 800, "passed": True}, {"ranks": 1_008, "passed": False}]
    assert res["capped"] is False


def test_find_max_reports_zero_when_the_start_fails() -> None:
    res = find_max(lambda ranks: False, 10_240)
    assert res["max_ranks"] == 0 and res["tried"] == [{"ranks": 10_240, "passed": False}]


def test_find_max_stops_at_the_limit_and_says_so() -> None:
    res = find_max(lambda ranks: True, 8_192, limit=13_000)
    assert [t["ranks"] for t in res["tried"]] == [8_192, 10_240, 12_800]
    assert res["max_ranks"] == 12_800 and res["capped"] is True


def test_find_max_rounds_the_start_to_a_whole_job() -> None:
    res = find_max(lambda ranks: ranks < 700, 500)
    assert [t["ranks"] for t in res["tried"]] == [512, 640, 800]
    assert res["max_ranks"] == 640


def test_the_ceiling_refuses_to_measure_with_the_workers_record_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ceiling is a plain kafka-python consumer: in a process where the workers' C record reader is installed
    it would measure that reader instead, and the ratios would hide what the reader saves."""
    from kafka.record import memory_records
    from kafka.record.default_records import DefaultRecordBatch

    from bench.throughput import ceiling
    from infra import kafka_records
    from infra.settings import load_settings

    monkeypatch.setattr(memory_records, "DefaultRecordBatch", DefaultRecordBatch)
    kafka_records.install()
    with pytest.raises(RuntimeError, match="plain-consumer ceiling"):
        ceiling(load_settings(env={}), ["steps"], 1)


def test_the_ceiling_is_the_median_read() -> None:
    from bench.throughput import median_read

    reads = [{"events_per_s": 180_000.0, "cpu_us_per_event": 5.0}, {"events_per_s": 210_000.0, "cpu_us_per_event": 4.4},
             {"events_per_s": 160_000.0, "cpu_us_per_event": 6.1}]
    assert median_read(reads) is reads[0]
    assert median_read(reads[1:]) is reads[1]  # an even count: the faster of the middle two
