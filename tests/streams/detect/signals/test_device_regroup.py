"""Device samples regrouped a column at a time give exactly what the per-sample loop gives: the same
ticks (keys, values), the same devices waited for, the same late count, on random chunks, as lists (JSON)
or arrays (a binary frame); a tick restored from a snapshot of flat lists takes more samples as values."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np

from streams.detect.signals.device import PIECES, TICK_NS, _joined, _regroup_arrays, _regroup_each, device_ticks
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


def _listed(columns: dict[str, Any]) -> dict[str, Any]:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in columns.items()}


def _held(state: SignalState) -> str:
    ticks = {t: _listed(_joined(dict(state.ticks[t]))) for t in sorted(state.ticks)}
    return repr((ticks, list(state.device_tick.items()), state.released_tick, state.late_samples))


def test_column_regrouping_matches_the_per_sample_loop() -> None:
    rng = random.Random(7)
    for arrays in (False, True):
        for _ in range(200):
            each, cols = SignalState(), SignalState()
            for step in range(12):
                chunk = _chunk(rng, 100 + step)
                a, b = copy.deepcopy(chunk), copy.deepcopy(chunk)
                if arrays:  # as a binary frame brings it
                    b = {k: np.asarray(v, dtype=np.float64 if k == "power_w" or k == "temp_c" else np.int64)
                         if k not in ("host", "kind", "job", "behind_ns") else v for k, v in b.items()}
                flush = rng.random() < 0.1
                out_each = [_listed(x) for x in _with_each(a, each, flush)]
                out_cols = [_listed(dict(x)) for x in device_ticks(b, cols, flush)]  # type: ignore[arg-type]
                assert repr(out_each) == repr(out_cols)
                assert _held(each) == _held(cols)


def test_a_tick_of_an_older_snapshot_takes_more_samples_as_values() -> None:
    state = SignalState()
    t = 100
    state.ticks[t] = {"host": ["h"], "device": [0], "rank": [3], "ts_ns": [t * TICK_NS], "power_w": [300.0]}
    chunk = {"kind": "device", "job": "j", "host": ["h"], "device": np.asarray([1]), "rank": np.asarray([4]),
             "ts_ns": np.asarray([t * TICK_NS + 5]), "power_w": np.asarray([310.0])}
    assert _regroup_arrays(chunk, state)
    assert PIECES not in state.ticks[t]
    assert state.ticks[t] == {"host": ["h", "h"], "device": [0, 1], "rank": [3, 4],
                              "ts_ns": [t * TICK_NS, t * TICK_NS + 5], "power_w": [300.0, 310.0]}


def _with_each(chunk: dict[str, Any], state: SignalState, flush: bool) -> list[dict[str, Any]]:
    """device_ticks with the per-sample regrouping (the reference)."""
    _regroup_each(chunk, state)
    # the release logic after the regrouping is shared: run it on an empty chunk of this state
    return device_ticks({"kind": "device", "job": chunk["job"], "ts_ns": []}, state, flush)


def test_a_ragged_chunk_takes_the_per_sample_loop() -> None:
    assert not _regroup_arrays({"host": ["h"], "device": [0], "ts_ns": [1.0]}, SignalState())
    assert not _regroup_arrays({"host": ["h"], "device": [0, 1], "ts_ns": [1, 2]}, SignalState())
    assert not _regroup_arrays({"host": "h", "device": [0], "ts_ns": [1]}, SignalState())
    assert not _regroup_arrays({"host": ["h"], "device": [0], "ts_ns": [1], "power_w": ["300"]}, SignalState())
    assert not _regroup_arrays({"host": ["h"], "device": [0], "ts_ns": [2**64 - 1]}, SignalState())
