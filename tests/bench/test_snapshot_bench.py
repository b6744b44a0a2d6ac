"""bench.snapshot times what the worker encodes: a played job's engine, restorable, at every level it lists."""

from __future__ import annotations

from bench.snapshot import LEVELS, measure, played
from streams.detect.state.format import ZSTD_LEVEL
from streams.detect.state.store import decode_snapshot, encode


def test_the_played_job_has_every_rank_and_its_snapshot_restores_with_them() -> None:
    engine = played(64, 3)
    restored = decode_snapshot(encode(engine))
    assert restored is not None
    assert restored[0].job == engine.job and restored[0].frames.topo is not None
    assert restored[0].stats.frames == engine.stats.frames > 0


def test_every_level_is_measured_and_the_workers_level_is_one_of_them() -> None:
    result = measure(played(64, 3), rounds=1)
    assert set(result["levels"]) == {str(level) for level in LEVELS}
    assert str(ZSTD_LEVEL) in result["levels"]
    assert all(row["mb"] > 0 and row["compress_ms"] >= 0 for row in result["levels"].values())
    assert result["encoded_mb"] < result["document_mb"] and result["document_ms"] > 0


def test_the_played_job_judges_a_device_tick_a_step_as_a_live_worker_does() -> None:
    """Each step's device samples carry that step's second: samples stamped with the wall clock while the whole
    job is played at once fell into one or two ticks that stayed held, so the engine never judged a tick and
    its snapshot carried every step's samples (bench.snapshot measured 27 ms where a live worker encodes 10)."""
    from bench.throughput import T0_NS
    from streams.detect.signals.device import HOLD_TICKS, TICK_NS

    steps = 6
    engine = played(64, steps)
    first = T0_NS // TICK_NS
    assert engine.signals.released_tick == first + steps - 1 - HOLD_TICKS
    assert sorted(engine.signals.ticks) == [first + steps - HOLD_TICKS + i for i in range(HOLD_TICKS)]
