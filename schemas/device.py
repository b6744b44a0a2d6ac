"""Whole-run device samples T1–T7 (npu-smi / NVML), one per device per sampling tick."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from schemas.decoding import join, require

PERCENT_FIELDS = ("aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct")
# T1–T7 and the clock (R1 down-clocking, spec §3), in the order detection keeps their columns
METRICS = ("power_w", "temp_c", "aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct", "freq_mhz")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSample:
    """T1 power_w, T2 temp_c, T3 aicore_pct, T4 aicpu_pct, T5 ctrlcpu_pct, T6 mem_pct,
    T7 membw_pct; freq_mhz for down-clocking checks. Null = not available on this device.

    job/rank are optional: a host sampler may not know which job owns a device.
    """

    TYPE: ClassVar[str] = "device"

    host: str
    device: int
    ts_ns: int
    job: str | None = None
    rank: int | None = None
    device_kind: str | None = None
    power_w: float | None = None
    temp_c: float | None = None
    aicore_pct: float | None = None
    aicpu_pct: float | None = None
    ctrlcpu_pct: float | None = None
    mem_pct: float | None = None
    membw_pct: float | None = None
    freq_mhz: float | None = None

    def check(self, path: str) -> None:
        require(bool(self.host), join(path, "host"), "must not be empty")
        require(self.device >= 0, join(path, "device"), "must be >= 0")
        require(self.ts_ns > 0, join(path, "ts_ns"), "must be a positive epoch timestamp in ns")
        require(self.power_w is None or self.power_w >= 0, join(path, "power_w"), "must be >= 0")
        for name in PERCENT_FIELDS:
            value = getattr(self, name)
            require(value is None or 0 <= value <= 100, join(path, name), "must be a percentage in [0, 100]")
