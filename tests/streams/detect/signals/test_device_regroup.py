"""Device samples regrouped a column at a time give exactly what the per-sample loop gives: the same
ticks (keys, order, values), the same devices waited for, the same late count, on random chunks."""

from __future__ import annotations

import copy
import random
from typing import Any

from streams.detect.signals.device import TICK_NS, _regroup_columns, _regroup_each, device_ticks
from streams.detect.signals.shared import SignalState


def _chunk(rng: random.Random, base_tick: int) -> dict[str, Any]:
    n = rng.choice([0, 1, 2, 7, 40])
    spread = rng.choice([0, 0, 1, 3])
    ts = [(base_tick + rng.randint(-spread, spread)) * TICK_NS + rng.randrange(TICK_NS) for _ in range(n)]
    hosts = [f"node-{rng.randrange(4)}" for _ in range(n)]
    devices = [rng.randrange(8) for _ in range(n)]
    chunk: dict[str, Any] = {"kind": "device", "job": "j", "host": hosts, "device": devices,
                             "rank": [rng.randrange(-1, 32) for _ in range(n)], "ts_ns": ts,
                             "power_w": [rng.choice([300.0, float("nan")]) for _ in range(n)], "behind_ns": 0}
    if rng.random() < 0.2:
        chunk["temp_c"] = [60.0] * n  # a column the held ticks do not have yet
    return chunk


def test_column_regrouping_matches_the_per_sample_loop() -> None:
    rng = random.Random(7)
    for _ in range(200):
        each, cols = SignalState(), SignalState()
        for step in range(12):
            chunk = _chunk(rng, 100 + step)
            a, b = copy.deepcopy(chunk), copy.deepcopy(chunk)
            flush = rng.random() < 0.1
            out_each = [dict(x) for x in _with_each(a, each, flush)]
            out_cols = device_ticks(b, cols, flush)
            assert repr(out_each) == repr(out_cols)
            assert repr((each.ticks, list(each.device_tick.items()), each.released_tick, each.late_samples)) == \
                repr((cols.ticks, list(cols.device_tick.items()), cols.released_tick, cols.late_samples))


def _with_each(chunk: dict[str, Any], state: SignalState, flush: bool) -> list[dict[str, Any]]:
    """device_ticks with the per-sample regrouping (the reference)."""
    _regroup_each(chunk, state)
    # the release logic after the regrouping is shared: run it on an empty chunk of this state
    return device_ticks({"kind": "device", "job": chunk["job"], "ts_ns": []}, state, flush)


def test_a_ragged_chunk_takes_the_per_sample_loop() -> None:
    assert not _regroup_columns({"host": ["h"], "device": [0], "ts_ns": [1.0]}, SignalState())
    assert not _regroup_columns({"host": ["h"], "device": [0, 1], "ts_ns": [1, 2]}, SignalState())
    assert not _regroup_columns({"host": "h", "device": [0], "ts_ns": [1]}, SignalState())
