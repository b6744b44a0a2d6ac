"""R2 at fleet scale: a device counts after repeated CUSUM alarms (streams/signals.py `_confirmed`)."""

from __future__ import annotations

import numpy as np

from steplens.config import DetectionConfig
from streams.rules.base import Alarms
from streams.signals import SignalState, _confirmed


def _alarms(idx: list[int], n: int = 4) -> Alarms:
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return Alarms.where(mask, np.ones(n), np.zeros(n), np.ones(n))


def test_one_odd_sample_never_counts_a_sustained_drift_does() -> None:
    cfg, state, x = DetectionConfig(), SignalState(), np.ones(4)
    kept = [_confirmed(_alarms([0, 1] if t == 0 else [1]), x, state, "r2:temp_c", cfg).index.tolist()
            for t in range(5)]
    assert all(0 not in k for k in kept), "device 0 alarmed once"
    assert kept[cfg.r2_confirm - 1] == [1], "device 1 alarming every sample counts from the confirm-th one"


def test_confirm_one_is_the_bare_rule() -> None:
    cfg = DetectionConfig(r2_confirm=1)
    assert _confirmed(_alarms([2]), np.ones(4), SignalState(), "k", cfg).index.tolist() == [2]


def test_unsampled_device_keeps_its_history() -> None:
    cfg, state = DetectionConfig(), SignalState()
    x = np.ones(4)
    gap = np.array([1.0, np.nan, 1.0, 1.0])
    _confirmed(_alarms([1]), x, state, "k", cfg)
    for _ in range(5):
        _confirmed(_alarms([]), gap, state, "k", cfg)  # device 1 not sampled: its window does not move
    _confirmed(_alarms([1]), x, state, "k", cfg)
    assert _confirmed(_alarms([1]), x, state, "k", cfg).index.tolist() == [1]


def _tick_chunk(ts: list[int], devices: list[int]) -> dict[str, object]:
    n = len(ts)
    return {"kind": "device", "job": "j", "host": ["node-0"] * n, "device": devices, "rank": devices, "ts_ns": ts,
            "temp_c": [50.0] * n}


def test_device_samples_are_released_per_complete_tick() -> None:
    from streams.signals import TICK_NS, device_ticks
    state = SignalState()
    assert device_ticks(_tick_chunk([0, 0], [0, 1]), state) == []
    assert device_ticks(_tick_chunk([0, TICK_NS], [2, 0]), state) == [], "tick 0 may still be completing"
    out = device_ticks(_tick_chunk([2 * TICK_NS], [0]), state)
    assert [c["device"] for c in out] == [[0, 1, 2]], "tick 0 whole, once samples two ticks newer arrived"
    assert [c["device"] for c in device_ticks(_tick_chunk([], []), state, flush=True)] == [[0], [0]]
