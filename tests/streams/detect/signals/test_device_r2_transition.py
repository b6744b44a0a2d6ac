"""R2 leaves out ticks that straddle a job-wide load change (streams/detect/signals/device.py `_in_transition`).

Each host's agent samples at its own phase, so at a checkpoint or an evaluation pass one tick
holds devices sampled before the change and devices sampled after it. Removing the common mode
then leaves the early half "drifted" by the change itself: R2 alarmed on healthy devices at the
checkpoint of every simulated run once the simulator's hosts sampled at their own phases."""

from __future__ import annotations

from streams.detect.config import DetectionConfig
from streams.detect.signals.device import DeviceParams, device_findings
from streams.detect.signals.shared import SignalState

HOSTS, PER_HOST = 4, 4
HIGH, LOW = 300.0, 150.0


def _tick(t: int, powers: list[float]) -> dict[str, object]:
    n = HOSTS * PER_HOST
    return {"host": [f"node-{i // PER_HOST}" for i in range(n)], "device": [i % PER_HOST for i in range(n)],
            "rank": list(range(n)), "ts_ns": [t * 1_000_000_000] * n,
            "power_w": powers, "temp_c": [60.0] * n, "aicore_pct": [90.0] * n, "aicpu_pct": [3.0] * n,
            "ctrlcpu_pct": [12.0] * n, "mem_pct": [70.0] * n, "membw_pct": [55.0] * n, "freq_mhz": [1800.0] * n}


def _r2_power(cfg: DetectionConfig) -> list[str]:
    """60 steady ticks, then checkpoints: hosts 0-1 sample after each change, hosts 2-3 before it."""
    state, found = SignalState(), []
    early = HOSTS // 2 * PER_HOST
    half = [LOW] * early + [HIGH] * (HOSTS * PER_HOST - early)
    back = [HIGH] * early + [LOW] * (HOSTS * PER_HOST - early)
    plan = [[HIGH + (i % 3) for i in range(HOSTS * PER_HOST)]] * 60
    for _ in range(4):  # an evaluation pass and a checkpoint: the load drops and comes back every other second
        plan += [half, [LOW] * 16, back, [HIGH + (i % 3) for i in range(16)]]
    for t, powers in enumerate(plan):
        found += [f"{f.host}/{f.device}" for f in device_findings(_tick(t, powers), state, cfg.params(DeviceParams), {})
                  if f.rule == "R2" and f.metric == "T1"]
    return found


def test_ticks_straddling_a_job_wide_change_raise_no_drift() -> None:
    assert _r2_power(DetectionConfig()) == []


def test_without_the_gate_the_same_ticks_raise_drift() -> None:
    assert _r2_power(DetectionConfig(r2_transition=0.0)), "the case must exercise R2 (else the test proves nothing)"
