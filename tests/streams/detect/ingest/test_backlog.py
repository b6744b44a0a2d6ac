"""backlog(): how far behind its input the decode stage is after a poll (pure; a stand-in consumer
with kafka-python's assignment / highwater / position surface)."""

from __future__ import annotations

from streams.detect.ingest.loop import backlog


class _Consumer:
    def __init__(self, high: dict[str, int | None], position: dict[str, int]) -> None:
        self.high, self.pos = high, position

    def assignment(self) -> set[str]:
        return set(self.high)

    def highwater(self, tp: str) -> int | None:
        return self.high[tp]

    def position(self, tp: str) -> int:
        return self.pos[tp]


def test_caught_up_partitions_are_not_behind() -> None:
    assert backlog(_Consumer({"a": 10, "b": 7}, {"a": 10, "b": 7}), {"a": [1]}) == (0, False)


def test_records_waiting_count_as_lag_and_a_partition_left_out_of_the_poll_starves() -> None:
    consumer = _Consumer({"a": 10, "b": 50}, {"a": 10, "b": 20})
    assert backlog(consumer, {"b": [1]}) == (30, False)  # b is behind, but this poll read it
    assert backlog(consumer, {"a": [1]}) == (30, True)   # b is behind and gave nothing


def test_a_partition_not_fetched_since_it_was_assigned_starves() -> None:
    """After a rebalance, a partition without a fetch yet has no highwater: its backlog is unknown."""
    consumer = _Consumer({"a": 10, "b": None}, {"a": 10, "b": 0})
    assert backlog(consumer, {"a": [1]}) == (0, True)
