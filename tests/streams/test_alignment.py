"""The decode stage reads its topics in step (streams/ingest/alignment.py): pure unit tests."""

from __future__ import annotations

from streams.ingest.alignment import TopicAlignment


def test_a_partition_far_ahead_waits_for_the_least_advanced_one_with_records_waiting() -> None:
    a = TopicAlignment(window_ms=2_000)
    a.consumed("steps-0", 50_000)
    a.consumed("kernels-0", 10_000)
    pause, resume = a.plan({"steps-0": 900, "kernels-0": 400})
    assert pause == {"steps-0"} and resume == set()
    # the summaries catch up to within the window: steps resume
    a.consumed("kernels-0", 48_500)
    pause, resume = a.plan({"steps-0": 900, "kernels-0": 30})
    assert pause == set() and resume == {"steps-0"}
    assert a.paused == set()


def test_the_least_advanced_partition_is_never_paused() -> None:
    a = TopicAlignment(window_ms=1_000)
    for i, t in enumerate((5_000, 9_000, 20_000)):
        a.consumed(f"p{i}", t)
    pause, _ = a.plan({"p0": 10, "p1": 10, "p2": 10})
    assert "p0" not in pause and pause == {"p1", "p2"}


def test_partitions_with_nothing_waiting_hold_nobody_back() -> None:
    a = TopicAlignment(window_ms=1_000)
    a.consumed("jobs-0", 1_000)        # old, but nothing waiting on it
    a.consumed("steps-0", 60_000)
    pause, resume = a.plan({"jobs-0": 0, "steps-0": 5})
    assert pause == set() and resume == set()


def test_a_partition_with_records_but_none_read_yet_counts_as_least_advanced() -> None:
    a = TopicAlignment(window_ms=1_000)
    a.consumed("steps-0", 60_000)
    pause, _ = a.plan({"steps-0": 5, "kernels-0": 7})
    assert pause == {"steps-0"}


def test_caught_up_resumes_everything_and_revoked_partitions_are_forgotten() -> None:
    a = TopicAlignment(window_ms=1_000)
    a.consumed("a", 10_000)
    a.consumed("b", 1_000)
    assert a.plan({"a": 3, "b": 3})[0] == {"a"}
    pause, resume = a.plan({"a": 0, "b": 0})
    assert pause == set() and resume == {"a"}
    a.consumed("c", 1)
    a.plan({"b": 1})  # a and c revoked
    assert set(a.newest_ms) == {"b"}


def test_window_zero_turns_alignment_off() -> None:
    a = TopicAlignment(window_ms=0)
    a.consumed("a", 10_000)
    assert a.plan({"a": 1, "b": 1}) == (set(), set())
