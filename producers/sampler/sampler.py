"""The node sampler: every `interval` seconds one DeviceSample per device, joined to its rank.

Pure part: `build_samples` (readings + device map + time in, samples out). The loop reads the
source, re-reads the run directory's device map (written by the ranks' hooks) and emits.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from producers.hook.core import Emitter
from producers.sampler.ranks import read_device_map
from producers.sampler.sources import HostSource, Reading, Source
from schemas import DeviceSample

FIELDS = ("power_w", "temp_c", "aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct", "freq_mhz")


def build_samples(host: str, kind: str, readings: dict[int, Reading], devices: dict[int, tuple[str, int]],
                  ts_ns: int) -> list[DeviceSample]:
    out: list[DeviceSample] = []
    for dev in sorted(readings):
        values = readings[dev]
        job, rank = devices.get(dev, (None, None))
        kw: dict[str, float | None] = {}
        for f in FIELDS:
            v = values.get(f)
            kw[f] = float(v) if isinstance(v, int | float) else None
        out.append(DeviceSample(host=host, device=dev, ts_ns=ts_ns, job=job, rank=rank, device_kind=kind, **kw))
    return out


class NodeSampler:
    """Samples `source` every `interval_s` and emits through `emitter` until stopped."""

    def __init__(self, source: Source, emitter: Emitter, host: str, run_dir: Path, interval_s: float = 1.0) -> None:
        self.source = source
        self.emitter = emitter
        self.host = host
        self.run_dir = run_dir
        self.interval_s = interval_s
        self.samples = 0
        self._stop = threading.Event()

    def tick(self) -> list[DeviceSample]:
        devices = read_device_map(self.run_dir)
        if isinstance(self.source, HostSource) and devices:
            self.source.devices = sorted(devices)
        samples = build_samples(self.host, self.source.kind, self.source.read(), devices, time.time_ns())
        # One hand-over per tick, sent at once: with packing on (key = host) the node's devices
        # leave as one record per tick, and the emitter's worker wakes once per tick either way.
        batch = getattr(self.emitter, "emit_batch", None)
        if batch is not None:
            batch(samples, send_now=True)
        else:
            for s in samples:
                self.emitter.emit(s)
        self.samples += len(samples)
        return samples

    def run(self, ticks: int | None = None) -> None:
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set() and (ticks is None or n < ticks):
            self.tick()
            n += 1
            next_at += self.interval_s
            self._stop.wait(max(next_at - time.monotonic(), 0.0))

    def stop(self) -> None:
        self._stop.set()
