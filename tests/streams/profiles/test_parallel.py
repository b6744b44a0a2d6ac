"""Parallel parsing (slices in a process pool) gives exactly the serial result, and falls back to the
validating serial reader when a fast cut lands inside a string."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streams.profiles.importers import kineto
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.jsonstream import EventStream
from streams.profiles.model import Profile
from streams.profiles.synthetic import write_trace


def _same(a: Profile, b: Profile) -> None:
    for col in ("ts", "dur", "kind", "stream", "corr"):
        assert np.array_equal(getattr(a.kernels, col), getattr(b.kernels, col)), col
    for table in ("runtime", "ops"):
        assert np.array_equal(getattr(a, table).ts, getattr(b, table).ts)
        assert [a.names[i] for i in getattr(a, table).name] == [b.names[i] for i in getattr(b, table).name]
    assert [a.names[i] for i in a.kernels.name] == [b.names[i] for i in b.kernels.name]
    assert a.steps == b.steps and a.collectives == b.collectives and a.events == b.events


def test_parallel_equals_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.profiles.jsonstream.CHUNK_BYTES", 1 << 16)  # many slices
    path = tmp_path / "t.json"
    write_trace(path, 3_000_000, layers=200)
    _same(parse_kineto(path, workers=1), parse_kineto(path, workers=2, parallel_bytes=0))


def test_cut_inside_a_string_falls_back_to_the_validating_reader(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.profiles.jsonstream.CHUNK_BYTES", 256)
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}" + ("}, {" * 40 if i == 5 else ""), "ts": i, "dur": 1,
               "args": {"stream": 7, "correlation": i}} for i in range(50)]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"traceEvents": events}))
    slices = [s for s in EventStream(path, chunk_bytes=256).raw_slices() if isinstance(s, bytes)]
    assert any(kineto._collect_slice(s) is None for s in slices), "no cut landed inside the string"
    serial = parse_kineto(path, workers=1)
    parallel = parse_kineto(path, workers=2, parallel_bytes=0)
    _same(serial, parallel)
    assert len(parallel.kernels) == 50
