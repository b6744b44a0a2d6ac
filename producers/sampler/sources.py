"""Where device samples come from: npu-smi (Ascend), NVML (NVIDIA), /proc (host only).

A source returns {device index: {DeviceSample field: value}} for one tick; `auto` picks the
first that works on this node.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import subprocess
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from producers.sampler.npu_smi import parse_watch
from producers.sampler.procfs import CpuTimes, cpu_percent, memory_percent, read_cpu_times

Reading = dict[str, float | str | None]


class Source(Protocol):
    kind: str

    def read(self) -> dict[int, Reading]: ...

    def close(self) -> None: ...


class NpuSmiSource:
    """Follows `npu-smi info watch` in a thread and reports each chip's latest row."""

    kind = "npu"

    def __init__(self, interval_s: float, command: list[str] | None = None, chips_per_npu: int = 1) -> None:
        cmd = command or ["npu-smi", "info", "watch", "-d", str(max(int(interval_s), 1))]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self._chips = chips_per_npu
        self._latest: dict[int, Reading] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._follow, name="steplens-npu-smi", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        assert self._proc.stdout is not None
        self.feed(self._proc.stdout)

    def feed(self, lines: Iterable[str]) -> None:
        for reading in parse_watch(lines):
            values: Reading = dict(reading.values)
            with self._lock:
                self._latest[reading.device_index(self._chips)] = values

    def read(self) -> dict[int, Reading]:
        with self._lock:
            return dict(self._latest)

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()


class NvmlSource:
    """NVIDIA GPUs through nvidia-ml-py: power, temperature, SM and memory utilisation, clocks."""

    kind = "gpu"

    def __init__(self) -> None:
        self._nv: Any = importlib.import_module("pynvml")
        self._nv.nvmlInit()
        self._handles = [self._nv.nvmlDeviceGetHandleByIndex(i) for i in range(self._nv.nvmlDeviceGetCount())]

    def read(self) -> dict[int, Reading]:
        nv = self._nv
        out: dict[int, Reading] = {}
        for i, h in enumerate(self._handles):
            r: Reading = {}
            for field, fn in (
                ("power_w", lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("temp_c", lambda h: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
                ("aicore_pct", lambda h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                ("membw_pct", lambda h: float(nv.nvmlDeviceGetUtilizationRates(h).memory)),
                ("mem_pct", lambda h: 100.0 * nv.nvmlDeviceGetMemoryInfo(h).used / nv.nvmlDeviceGetMemoryInfo(h).total),
                ("freq_mhz", lambda h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ):
                try:
                    r[field] = fn(h)
                except Exception:
                    r[field] = None
            out[i] = r
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()


class HostSource:
    """Host CPU busy % (as ctrlcpu_pct) and memory used % (mem_pct) from /proc, for `devices`."""

    kind = "host"

    def __init__(self, devices: Iterable[int] = (0,)) -> None:
        self.devices = list(devices)
        self._last: CpuTimes = read_cpu_times()

    def read(self) -> dict[int, Reading]:
        now = read_cpu_times()
        cpu = cpu_percent(self._last, now)
        self._last = now
        mem = memory_percent()
        return {d: {"ctrlcpu_pct": cpu, "mem_pct": mem} for d in self.devices}

    def close(self) -> None:
        pass


def open_source(kind: str, interval_s: float) -> Source:
    """`npu-smi`, `nvml`, `host`, or `auto` (npu-smi on PATH, else NVML with a GPU, else host)."""
    if kind == "npu-smi" or (kind == "auto" and shutil.which("npu-smi")):
        return NpuSmiSource(interval_s)
    if kind in ("nvml", "auto"):
        try:
            return NvmlSource()
        except Exception:
            if kind == "nvml":
                raise
    return HostSource()
