"""R1/R2 on device samples (streams/detect/signals/device.py): R1 lower bounds only on busy devices/jobs, the
down-clock bound; R2's warm-up per metric."""

from __future__ import annotations

from typing import Any

import numpy as np

from schemas.columns import DEVICE_METRICS
from streams.detect.config import DetectionConfig
from streams.detect.scopes.finding import Finding
from streams.detect.signals.device import DeviceParams, _rounds, device_findings
from streams.detect.signals.shared import SignalState

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
        out.extend(f for f in device_findings(tick, state, cfg.params(DeviceParams), {}) if f.rule == "R1")
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


def test_r2_warm_up_per_metric_power_ready_before_temperature() -> None:
    """Power follows the load at once, temperature lags: a power shift after the power warm-up and
    history is judged against a baseline learned before it, while temperature is still warming up."""
    cfg = DetectionConfig(r2_warmup=60, r2_warmup_power_w=5, r2_history=10)
    state = SignalState()
    rng = np.random.default_rng(1)
    found: list[Finding] = []
    for t in range(40):
        chunk = _tick(t)
        for m in ("power_w", "temp_c"):
            chunk[m] = list(np.asarray(chunk[m]) + rng.normal(0, 0.1, N))
            if t >= 25:  # device 0: power and temperature both step up
                chunk[m][0] += 40.0
        found.extend(device_findings(chunk, state, cfg.params(DeviceParams), {}))
    r2 = [f for f in found if f.rule == "R2"]
    assert {f.metric for f in r2} == {"T1"}, "power is judged after 5 + 10 samples, temperature still warms up"
    assert {f.device for f in r2} == {0}
    assert min(f.observed or 0.0 for f in r2) > 30.0, "the finding carries the deviation from the job's median"


def _job_tick(t: int, power: np.ndarray) -> dict[str, Any]:
    """Devices on hosts of 8 (rank r on node-r//8)."""
    n = power.size
    chunk: dict[str, Any] = {"kind": "device", "job": "j", "host": [f"node-{r // 8}" for r in range(n)],
                             "device": [r % 8 for r in range(n)], "rank": list(range(n)),
                             "ts_ns": [t * 1_000_000_000] * n}
    for m in DEVICE_METRICS:
        chunk[m] = [62.0 if m == "aicore_pct" else 1800.0 if m == "freq_mhz" else 50.0] * n
    chunk["power_w"] = power.tolist()
    return chunk


W = 48
BY_HOST_PARITY = np.array([(r // 8) % 2 for r in range(W)], dtype=np.int64)  # each stage spans 3 hosts


def _r2_power(shift: dict[int, float], stage_of: np.ndarray | None) -> set[int]:
    cfg = DetectionConfig(r2_warmup_power_w=0, r2_history=10)
    state, rng = SignalState(), np.random.default_rng(3)
    hit: set[int] = set()
    for t in range(40):
        power = 300.0 + rng.normal(0, 3.0, W)
        if t >= 20:
            for r, dw in shift.items():
                power[r] += dw
        hit |= {f.ranks[0] for f in device_findings(_job_tick(t, power), state, cfg.params(DeviceParams), {}, stage_of)
                if f.rule == "R2" and f.metric == "T1"}
    return hit


def test_r2_common_mode_is_the_devices_pp_stage() -> None:
    """A slow stage: its devices draw 40 W more, the other stage's 40 W less (they wait). Against
    the job's median (between the two) every device drifts; against its stage's, none does."""
    stage_shift = {r: (40.0 if BY_HOST_PARITY[r] == 0 else -40.0) for r in range(W)}
    assert _r2_power(stage_shift, BY_HOST_PARITY) == set()
    assert len(_r2_power(stage_shift, None)) > W // 2, "the job's median alone: the bimodal job looks drifted"


def test_r2_a_host_drifting_inside_its_stage_still_alarms() -> None:
    host = {r: 45.0 for r in range(8)}  # node-0: 8 of its stage's 24 devices
    assert _r2_power(host, BY_HOST_PARITY) == set(range(8))
    two_hosts = np.array([r // 16 for r in range(W)], dtype=np.int64)  # a stage on 2 hosts: the job's median
    assert _r2_power(host, two_hosts) == set(range(8))


def test_r2_gives_no_verdict_on_a_job_of_fewer_than_a_hosts_worth_of_devices() -> None:
    """Two devices have no majority to drift from, four a median that moves with each one's share of
    the work: their own load opened R2 incidents on healthy 2- and 4-rank jobs. A host's worth does."""
    params = DetectionConfig(r2_warmup_power_w=0, r2_history=10).params(DeviceParams)
    rng = np.random.default_rng(5)
    for n, expect in ((2, False), (4, False), (8, True)):
        state = SignalState()
        hit = False
        for t in range(40):
            power = 300.0 + rng.normal(0, 3.0, n) + (60.0 if t >= 20 else 0.0) * (np.arange(n) == 0)
            hit |= any(f.rule == "R2" for f in device_findings(_job_tick(t, power), state, params, {}))
        assert hit is expect, n


def _rounds_one_by_one(series: list[int], order: list[int]) -> list[list[int]]:
    """The rounds as the per-sample loop built them: each device's r-th sample in round r, in time order."""
    seen: dict[int, int] = {}
    rounds: list[list[int]] = []
    for pos, dev in zip(order, series, strict=True):
        r = seen.get(dev, 0)
        seen[dev] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(pos)
    return rounds


def test_rounds_hold_each_device_s_r_th_sample_in_time_order() -> None:
    rng = np.random.default_rng(3)
    assert _rounds(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == []
    for _ in range(300):
        size = int(rng.integers(1, 200))
        idx = rng.integers(0, int(rng.integers(1, 40)), size=size)
        order = np.argsort(rng.integers(0, 50, size=size), kind="stable")
        got = [r.tolist() for r in _rounds(idx[order], order)]
        assert got == _rounds_one_by_one(idx[order].tolist(), order.tolist())


def test_new_devices_are_numbered_in_order_of_first_appearance_after_the_known_ones() -> None:
    """A device's series index is its place in the job's `devices` table (snapshots keep it): a tick with known and
    new devices, some twice, numbers only the new ones, in the order they first appear."""
    state = SignalState(devices={"node-0/3": 0, "node-0/1": 1})
    chunk = _tick(5)
    chunk["device"] = [6, 3, 2, 6, 1, 0, 2, 7]
    device_findings(chunk, state, DetectionConfig().params(DeviceParams), {})  # type: ignore[arg-type]
    assert state.devices == {"node-0/3": 0, "node-0/1": 1, "node-0/6": 2, "node-0/2": 3, "node-0/0": 4, "node-0/7": 5}
    assert list(state.devices) == ["node-0/3", "node-0/1", "node-0/6", "node-0/2", "node-0/0", "node-0/7"]
