"""R2 at fleet scale: a device counts after repeated CUSUM alarms (streams/detect/signals/device.py `_confirmed`)."""

from __future__ import annotations

import numpy as np

from streams.detect.config import DetectionConfig
from streams.detect.rules.base import Alarms
from streams.detect.signals.device import DeviceParams, _confirmed
from streams.detect.signals.shared import SignalState


def _alarms(idx: list[int], n: int = 4) -> Alarms:
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return Alarms.where(mask, np.ones(n), np.zeros(n), np.ones(n))


def test_one_odd_sample_never_counts_a_sustained_drift_does() -> None:
    params, state, x = DetectionConfig().params(DeviceParams), SignalState(), np.ones(4)
    kept = [_confirmed(_alarms([0, 1] if t == 0 else [1]), x, state, "r2:temp_c", params).index.tolist()
            for t in range(5)]
    assert all(0 not in k for k in kept), "device 0 alarmed once"
    assert kept[params.r2_confirm - 1] == [1], "device 1 alarming every sample counts from the confirm-th one"


def test_confirm_one_is_the_bare_rule() -> None:
    params = DetectionConfig(r2_confirm=1).params(DeviceParams)
    assert _confirmed(_alarms([2]), np.ones(4), SignalState(), "k", params).index.tolist() == [2]


def test_unsampled_device_keeps_its_history() -> None:
    params, state = DetectionConfig().params(DeviceParams), SignalState()
    x = np.ones(4)
    gap = np.array([1.0, np.nan, 1.0, 1.0])
    _confirmed(_alarms([1]), x, state, "k", params)
    for _ in range(5):
        _confirmed(_alarms([]), gap, state, "k", params)  # device 1 not sampled: its window does not move
    _confirmed(_alarms([1]), x, state, "k", params)
    assert _confirmed(_alarms([1]), x, state, "k", params).index.tolist() == [1]


def _tick_chunk(ts: list[int], devices: list[int]) -> dict[str, object]:
    n = len(ts)
    return {"kind": "device", "job": "j", "host": ["node-0"] * n, "device": devices, "rank": devices, "ts_ns": ts,
            "temp_c": [50.0] * n}


def test_device_samples_are_released_per_complete_tick() -> None:
    from streams.detect.signals.device import TICK_NS, device_ticks
    state = SignalState()
    assert device_ticks(_tick_chunk([0, 0], [0, 1]), state) == []
    assert device_ticks(_tick_chunk([0, TICK_NS], [2, 0]), state) == [], "tick 0 may still be completing"
    out = device_ticks(_tick_chunk([2 * TICK_NS], [0]), state)
    assert [list(c["device"]) for c in out] == [[0, 1, 2]], "tick 0 whole, once samples two ticks newer arrived"
    assert [list(c["device"]) for c in device_ticks(_tick_chunk([], []), state, flush=True)] == [[0], [0]]


def test_a_lagging_partition_holds_the_tick_until_its_devices_report_it() -> None:
    """The device topic's partitions run apart under a backlog: devices 0 and 1 are seconds ahead
    of device 2. A tick is evaluated whole (R2's common mode is the median device), never split."""
    from streams.detect.signals.device import TICK_NS, device_ticks
    state = SignalState()
    device_ticks(_tick_chunk([0, 0, 0], [0, 1, 2]), state)
    ahead = [t * TICK_NS for t in range(1, 6) for _ in (0, 1)]
    out = device_ticks(_tick_chunk(ahead, [0, 1] * 5), state)
    assert [list(c["device"]) for c in out] == [[0, 1, 2]], "tick 0 is whole; ticks 1-5 wait for device 2"
    out = device_ticks(_tick_chunk([TICK_NS, 2 * TICK_NS, 3 * TICK_NS], [2, 2, 2]), state)
    assert [sorted(c["device"]) for c in out] == [[0, 1, 2]] * 3, "device 2 caught up: ticks 1-3 whole"
    before = state.late_samples
    assert device_ticks(_tick_chunk([2 * TICK_NS], [1]), state) == [], "a sample of an evaluated tick is late"
    assert state.late_samples == before + 1


def test_a_silent_device_holds_the_ticks_a_bounded_time() -> None:
    from streams.detect.signals.device import TICK_NS, WAIT_TICKS, device_ticks
    state = SignalState()
    device_ticks(_tick_chunk([0, 0], [0, 1]), state)  # device 1 then goes silent (a dead host)
    first_release: dict[int, int] = {}
    for now in range(1, WAIT_TICKS + 3):
        for c in device_ticks(_tick_chunk([now * TICK_NS], [0]), state):
            first_release.setdefault(int(c["ts_ns"][0]) // TICK_NS, now)
    assert first_release[0] == 2, "tick 0 is whole: released two ticks on"
    assert first_release[1] == WAIT_TICKS, "tick 1 waits for device 1 until it was silent WAIT_TICKS ticks"


def test_a_device_whose_first_samples_come_late_is_waited_for_from_then_on() -> None:
    """Device 2 sits on a partition that lags from the start: its first sample belongs to a tick
    already evaluated. From then on the job's ticks wait for it, so its later samples are in the
    rules (before, it was never registered and every sample of it came late)."""
    from streams.detect.signals.device import TICK_NS, device_ticks
    state = SignalState()
    device_ticks(_tick_chunk([0, 0], [0, 1]), state)
    ahead = [t * TICK_NS for t in range(1, 6) for _ in (0, 1)]
    assert [list(c["device"]) for c in device_ticks(_tick_chunk(ahead, [0, 1] * 5), state)] == [[0, 1]] * 4
    assert device_ticks(_tick_chunk([2 * TICK_NS], [2]), state) == [], "tick 2 was evaluated: late"
    assert state.late_samples == 1
    assert device_ticks(_tick_chunk([6 * TICK_NS] * 2, [0, 1]), state) == [], "tick 4 waits for device 2"
    out = device_ticks(_tick_chunk([3 * TICK_NS, 4 * TICK_NS], [2, 2]), state)
    assert [sorted(c["device"]) for c in out] == [[0, 1, 2]], "device 2 caught up: tick 4 whole, with it"
