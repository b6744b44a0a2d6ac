"""The chunked event reader: same events as a plain json read for any chunk size; clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.jsonstream import EventStream, TraceFormatError
from tests.streams.profiles.conftest import ASCEND, KINETO

TRICKY = {
    "schemaVersion": 1,
    "traceEvents": [
        {"ph": "X", "name": 'a "},{" in a string', "ts": 1, "dur": 2, "args": {"l": [{"x": 1}, {"y": "}, {"}]}},
        {"ph": "X", "name": "b\\", "ts": 3, "dur": 4, "args": {"nested": {"deep": [{}, {}]}}},
        *({"ph": "X", "name": f"e{i}", "ts": i, "dur": 1} for i in range(200)),
    ],
    "deviceProperties": [{"id": 0}, {"id": 1}],
    "baseTimeNanoseconds": 5000,
}


def _read_all(path: Path, chunk: int) -> tuple[list[dict], dict]:  # type: ignore[type-arg]
    stream = EventStream(path, chunk_bytes=chunk)
    events = [e for batch in stream.batches() for e in batch]
    return events, stream.header


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
def test_any_chunk_size_gives_the_plain_json_events(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(TRICKY, indent=None if chunk % 2 else 1))
    events, header = _read_all(path, chunk)
    assert events == TRICKY["traceEvents"]
    assert header["deviceProperties"] == TRICKY["deviceProperties"]
    assert header["baseTimeNanoseconds"] == 5000


@pytest.mark.parametrize("chunk", [4096, 1 << 16])
def test_real_samples_split_identically(real_samples: Path, chunk: int) -> None:
    for path in (KINETO / "nccl_parser_config_nccl_data.json.gz",
                 ASCEND / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            data = json.load(fh)
        expected = data["traceEvents"] if isinstance(data, dict) else data
        events, _ = _read_all(path, chunk)
        assert events == expected


def test_truncated_trace_is_a_clear_error(real_samples: Path, tmp_path: Path) -> None:
    with gzip.open(KINETO / "trace_filter_sampled_rank-0.json.gz", "rb") as fh:
        raw = fh.read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        parse_kineto(cut)


def test_truncated_gzip_and_garbage_are_clear_errors(real_samples: Path, tmp_path: Path) -> None:
    raw = (KINETO / "trace_filter_sampled_rank-0.json.gz").read_bytes()
    bad_gz = tmp_path / "cut.json.gz"
    bad_gz.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match="cannot read"):
        parse_kineto(bad_gz)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01 not json at all")
    with pytest.raises(TraceFormatError, match="no trace event array"):
        parse_kineto(garbage)
