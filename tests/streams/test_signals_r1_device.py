"""R1 on device samples (streams/signals.py): lower bounds only on busy devices/jobs, the down-clock bound."""

from __future__ import annotations

from typing import Any

from steplens.config import DetectionConfig
from streams.ingest.decode import DEVICE_METRICS
from streams.scopes.finding import Finding
from streams.signals import SignalState, device_findings

N = 8


def _tick(t: int, **over: dict[int, float]) -> dict[str, Any]:
    """One tick of N healthy busy devices (AI Core 62 %, memory BW 38 %, clock 1800 MHz); `over`
    sets metric -> {device: value}."""
    base = {"power_w": 300.0, "temp_c": 67.0, "aicore_pct": 62.0, "aicpu_pct": 3.0, "ctrlcpu_pct": 12.0,
            "mem_pct": 70.0, "membw_pct": 38.0, "freq_mhz": 1800.0}
    chunk: dict[str, Any] = {"kind": "device", "job": "j", "host": ["node-0"] * N, "device": list(range(N)),
                             "rank": list(range(N)), "ts_ns": [t * 1_000_000_000] * N}
    for m in DEVICE_METRICS:
        chunk[m] = [over.get(m, {}).get(d, base[m]) for d in range(N)]
    return chunk


def _r1(ticks: list[dict[str, Any]], cfg: DetectionConfig | None = None) -> list[Finding]:
    cfg, state = cfg or DetectionConfig(), SignalState()
    out: list[Finding] = []
    for tick in ticks:
        out.extend(f for f in device_findings(tick, state, cfg, {}) if f.rule == "R1")
    return out


def test_memory_bandwidth_under_its_bound_on_a_busy_device_alarms_after_k_samples() -> None:
    cfg = DetectionConfig()
    found = _r1([_tick(t, aicore_pct={3: 66.0}, membw_pct={3: 22.0}) for t in range(cfg.r1_k + 2)], cfg)
    assert {(f.metric, f.device) for f in found} == {("T7", 3)}
    assert len(found) == 3, "from the k-th consecutive sample on"


def test_an_idle_device_or_a_checkpoint_is_no_lower_bound_alarm() -> None:
    # device 3 waits for a straggler (AI Core 40 %, bandwidth follows the load); then the whole job idles
    waiting = [_tick(t, aicore_pct={3: 40.0}, membw_pct={3: 22.0}) for t in range(6)]
    idle = {d: 25.0 for d in range(N)}
    checkpoint = [_tick(t, aicore_pct=idle, membw_pct={d: 15.0 for d in range(N)}) for t in range(6, 12)]
    assert _r1(waiting + checkpoint) == []


def test_a_starved_device_of_a_busy_job_alarms_on_ai_core() -> None:
    found = _r1([_tick(t, aicore_pct={5: 28.0, 6: 28.0}) for t in range(4)])
    assert {(f.metric, f.device) for f in found} == {("T3", 5), ("T3", 6)}
    assert all(f.threshold == DetectionConfig().r1_aicore_min_pct for f in found)


def test_down_clocking_of_a_busy_device_against_the_jobs_highest_clock() -> None:
    cfg = DetectionConfig()
    found = _r1([_tick(t, freq_mhz={2: 1200.0}) for t in range(4)], cfg)
    assert {(f.metric, f.device) for f in found} == {("clock", 2)}
    assert found[0].threshold == 1800.0 * (1 - cfg.r1_downclock_pct / 100)
    assert _r1([_tick(t, freq_mhz={2: 1750.0}) for t in range(4)]) == [], "under 5 % is not down-clocking"
    idle = [_tick(t, aicore_pct={2: 10.0}, freq_mhz={2: 900.0}) for t in range(4)]
    assert [f for f in _r1(idle) if f.metric == "clock"] == [], "an idle device may lower its clock (T3 flags it)"
    assert _r1([_tick(t, freq_mhz={2: 1200.0}) for t in range(4)], DetectionConfig(r1_downclock_pct=0)) == []


def test_every_device_down_clocked_from_the_start_alarms_once_a_rated_clock_was_seen() -> None:
    slow = {d: 1200.0 for d in range(N)}
    assert _r1([_tick(t, freq_mhz=slow) for t in range(4)]) == [], "no reference: the job's own clock"
    found = _r1([_tick(0)] + [_tick(t, freq_mhz=slow) for t in range(1, 5)])
    assert {f.device for f in found} == set(range(N))
