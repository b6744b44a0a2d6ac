"""What "the input lags" means to the engine: the newest chunk's word, held while batches keep coming.

A backlog holds window timeouts (missing reports are still queued, not lost). A batch is
stamped with the time it started, and evaluating one can take seconds in a backlog: that
time is no silence of the input. Only LAG_STALE_NS without input after the last batch was
done, over several ticks, makes a drained backlog "current" again.
"""

from __future__ import annotations

from typing import Any

from schemas import Incident, encode
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import LAG_STALE_NS, QUIET_TICKS, FleetEngine
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import T0, step_event

S = 1_000_000_000


def _chunks(step: int, ranks: range, lagging: bool) -> list[dict[str, Any]]:
    chunks, _ = decode_batch([encode(step_event(r, step, 100.0, world=16, dp_size=8)) for r in ranks], 1 << 20)
    for chunk in chunks:
        chunk["behind_ns"], chunk["lag"] = (60 * S, 50_000) if lagging else (0, 0)
    return [codec.loads(codec.dumps(c)) for c in chunks]


def _feed(fleet: FleetEngine, chunks: list[dict[str, Any]], now: int) -> None:
    for chunk in chunks:
        fleet.on_chunk(chunk, now)


def test_a_slow_batch_is_not_silence_and_a_drained_backlog_is() -> None:
    fleet = FleetEngine(DetectionConfig())
    for step in range(3):  # both hosts, current: a baseline of step times
        _feed(fleet, _chunks(step, range(16), lagging=False), T0 + step * S)
    # a backlog: host node-1 (ranks 8-15) runs behind on its partition
    _feed(fleet, _chunks(3, range(8), lagging=True), T0 + 10 * S)
    fleet.heard(T0 + 40 * S)  # that batch took 30 s to evaluate
    fleet.tick(T0 + 41 * S)
    frames = fleet.jobs["job-a"].frames
    assert 3 in frames.frames, "node-1's step 3 may still be queued: the window stays open"
    drained = T0 + 40 * S + LAG_STALE_NS + S
    fleet.tick(drained)  # one quiet tick after a long pause: the engine may have been busy
    assert frames.input_lagging
    for _ in range(QUIET_TICKS):  # nothing came for several ticks: the backlog is drained
        fleet.tick(drained)
    assert not frames.input_lagging
    fleet.tick(drained + frames.timeout_ns() + S)  # ... and node-1 still silent for a whole window timeout
    assert 3 not in frames.frames and frames.stats.incomplete == 1


def test_chunks_that_queued_for_the_engine_are_a_backlog_too() -> None:
    """The decode stage was current, but the engine is behind it: chunks waited on the internal topic
    (a slow batch before them). The host whose step is in a later chunk is not silent."""
    fleet = FleetEngine(DetectionConfig())
    for step in range(3):
        _feed(fleet, _chunks(step, range(16), lagging=False), T0 + step * S)
    for ranks, decoded, evaluated in ((range(4), 4, 20), (range(4, 8), 5, 30)):  # decoded seconds before
        late = _chunks(3, ranks, lagging=False)
        for chunk in late:
            chunk["decoded_ns"] = T0 + decoded * S
        _feed(fleet, late, T0 + evaluated * S)  # step 3 has waited 10 s, past its timeout, at the second
    fleet.heard(T0 + 30 * S)
    fleet.tick(T0 + 30 * S + S)
    frames = fleet.jobs["job-a"].frames
    assert frames.input_lagging and 3 in frames.frames
    fresh = _chunks(3, range(8, 16), lagging=False)
    for chunk in fresh:
        chunk["decoded_ns"] = T0 + 31 * S
    _feed(fleet, fresh, T0 + 31 * S)
    assert 3 not in frames.frames and frames.stats.incomplete == 0


def test_a_restored_job_counts_its_ranks_silence_from_the_start_up() -> None:
    """A worker down 100 s restores a job from its snapshot: the silence of its ranks while no worker ran
    is the worker's, not theirs. Host node-1's partition is read later than node-0's after the start-up
    (a rebalance): it is hung only once silent `hang_silence_s` since the start-up."""
    down = FleetEngine(DetectionConfig())
    for step in range(3):
        _feed(down, _chunks(step, range(16), lagging=False), T0 + step * S)
        down.tick(T0 + step * S)
    fleet = FleetEngine(DetectionConfig())
    fleet.jobs = down.jobs  # as streams/detect/app.py restores a snapshot
    awake = T0 + 100 * S
    hung: list[str] = []
    for i, step in enumerate(range(3, 40)):
        now = awake + i * S
        outputs = [o for chunk in _chunks(step, range(8), lagging=False) for o in fleet.on_chunk(chunk, now)]
        hung += [o.rule for o in outputs + fleet.tick(now) if isinstance(o, Incident) and o.rule.startswith("HUNG")]
        if now - awake < 15 * S:
            assert not hung, f"node-1 silent {(now - awake) / S:.0f} s since the start-up is not hung"
    assert hung == ["HUNG_HOST"], "a whole hang time after the start-up it is"
