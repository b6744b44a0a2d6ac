"""Host source reads the real /proc of this machine; the sampler joins devices registered by live ranks."""

from __future__ import annotations

import os
from pathlib import Path

from producers.emitter import BackgroundEmitter
from producers.exporter import InMemoryExporter
from producers.sampler.ranks import read_device_map, register_device
from producers.sampler.sampler import NodeSampler
from producers.sampler.sources import HostSource
from schemas import DeviceSample, decode_as


def test_host_samples_carry_rank_of_registered_devices(tmp_path: Path) -> None:
    register_device(tmp_path, 0, "job-a", 0)
    register_device(tmp_path, 1, "job-a", 1)
    exporter = InMemoryExporter()
    with BackgroundEmitter(exporter) as emitter:
        sampler = NodeSampler(HostSource(), emitter, "node-0", tmp_path, interval_s=0.01)
        sampler.run(ticks=3)
        assert emitter.flush(10)
    samples = [decode_as(DeviceSample, v) for v in exporter.values()]
    assert len(samples) == 6
    assert {(s.device, s.job, s.rank) for s in samples} == {(0, "job-a", 0), (1, "job-a", 1)}
    assert all(s.mem_pct is not None and 0 < s.mem_pct <= 100 for s in samples)


def test_dead_ranks_do_not_claim_devices(tmp_path: Path) -> None:
    path = register_device(tmp_path, 4, "job-b", 7)
    assert path is not None
    path.write_bytes(path.read_bytes().replace(str(os.getpid()).encode(), b"999999999"))
    assert read_device_map(tmp_path) == {}


def test_process_cpu_ticks_reads_past_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    from producers.sampler.procfs import process_cpu_ticks

    (tmp_path / "42").mkdir()
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    (tmp_path / "42" / "stat").write_text("42 (a (b) c) R 1 42 42 0 -1 4194304 10 0 0 0 170 23 0 0 20 0\n")
    assert process_cpu_ticks(42, proc=tmp_path) == 193
    assert process_cpu_ticks(os.getpid()) >= 0  # the real /proc
