"""Step, kernel and device chunks cross the partials topic as binary frames (numeric columns as raw buffers); the
engine reads them as it reads the JSON chunks of before, and `loads` still takes JSON (a topic written by
an older decode stage)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from producers.simulator.catalogue import straggler
from producers.simulator.events import FrameEncoder
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from schemas import encode
from streams.detect.combine.chunks import FRAME_MAGIC, dumps, dumps_split, loads
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch
from tests.streams.detect.combine.test_chunk_types import EVENTS
from tests.streams.helpers import T0, kernel_chunk, nan_spelled


def test_step_kernel_and_device_chunks_travel_as_frames_with_every_value() -> None:
    chunks, _ = decode_batch(EVENTS, 1 << 20)
    framed = [c for c in chunks if c["kind"] in ("steps", "kernels", "device")]
    assert sorted(c["kind"] for c in framed) == ["device", "kernels", "steps"]
    for chunk in framed:
        raw = dumps(chunk)
        assert raw.startswith(FRAME_MAGIC)
        back = loads(raw)
        assert any(isinstance(v, np.ndarray) for v in back.values())
        assert nan_spelled(back) == nan_spelled(chunk), chunk["kind"]


def test_job_chunks_stay_json() -> None:
    chunks, _ = decode_batch(EVENTS, 1 << 20)
    for chunk in (c for c in chunks if c["kind"] == "job"):
        raw = dumps(chunk)
        assert raw[:1] == b"{" and loads(raw) == orjson.loads(raw)


def test_a_column_that_does_not_fit_its_type_goes_as_json() -> None:
    chunk = kernel_chunk([[1, 3, [["mm", "compute", 1, 1000]], 0]])
    chunk["total_ns"] = [2**63]  # past int64: the frame declines, JSON carries it as it always did
    raw = dumps(chunk)
    assert raw[:1] == b"{" and loads(raw)["total_ns"] == [2**63]


def test_loaded_columns_are_writable_arrays() -> None:
    chunk = kernel_chunk([[r, 0, [["mm", "compute", 1, 10 + r]], 0] for r in range(4)])
    back = loads(dumps(chunk))
    total = back["total_ns"]
    assert isinstance(total, np.ndarray)
    total[0] = 1  # a consumer may work in place, as on a parsed list
    assert total.tolist() == [1, 11, 12, 13]


@pytest.mark.parametrize("mangle", [
    lambda raw: raw[:-3],                                    # truncated buffers
    lambda raw: raw + b"\0" * 8,                             # bytes beyond the last column
    lambda raw: raw.replace(b'"<i8"', b'"<i4"', 1),          # a type the frame never writes
    lambda raw: raw.replace(b'"_columns":[', b'"_columns":[7,', 1),  # a malformed column list
])
def test_a_damaged_frame_is_a_value_error(mangle: Any) -> None:
    raw = dumps(kernel_chunk([[1, 3, [["mm", "compute", 1, 1000]], 0]]))
    with pytest.raises(ValueError):
        loads(mangle(raw))


def test_split_frames_keep_each_part_under_the_limit() -> None:
    chunk = kernel_chunk([[r, 0, [[f"k{i}", "compute", 1, 10 + i] for i in range(1 + r % 20)], 0]
                          for r in range(500)])
    parts = dumps_split(chunk, limit=20_000)
    assert len(parts) > 1 and all(p.startswith(FRAME_MAGIC) and len(p) <= 20_000 for p in parts)
    assert sum(len(loads(p)["rank"]) for p in parts) == 500


def test_the_engine_gives_the_same_outputs_on_frames_as_on_json() -> None:
    topo = Topology(dp=8, tp=2, pp=2)
    job = FleetJob("frames", topo, steps=40, seed=3, faults=[straggler(topo, 5, 1.6, start=10)])
    start, _ = job.job_events()
    encoder = FrameEncoder(job)  # step, kernel-summary and device events, as the bench sends them
    batches = [[encode(start)]] + [[e.value for e in encoder.encode(frame)] for frame in job.iter_frames()]
    framed, json_fed = FleetEngine(DetectionConfig()), FleetEngine(DetectionConfig())
    got: tuple[list[Any], list[Any]] = ([], [])
    kinds: set[bytes] = set()
    for i, batch in enumerate(batches):
        now = T0 + i * 1_000_000_000
        chunks, _ = decode_batch(batch, 1 << 20)
        for chunk in chunks:
            raw = dumps(chunk)
            kinds.add(raw[:len(FRAME_MAGIC)])
            got[0].extend(framed.on_chunk(loads(raw), now))
            got[1].extend(json_fed.on_chunk(loads(orjson.dumps(chunk, option=orjson.OPT_SERIALIZE_NUMPY)), now))
        got[0].extend(framed.tick(now))
        got[1].extend(json_fed.tick(now))
    assert FRAME_MAGIC in kinds
    assert got[0] == got[1]
    assert any(getattr(o, "state", None) == "open" for o in got[0])


def _random_kernel_chunk(rng: np.random.Generator) -> Any:
    names = ["mm", "attn", "allreduce", "copy", None]
    summaries = []
    for rank in range(int(rng.integers(1, 30))):
        aggregates = [[names[int(rng.integers(0, 4))] + f"{int(rng.integers(0, 3))}",  # key
                       names[int(rng.integers(0, 5))], int(rng.integers(1, 9)), int(rng.integers(1, 10**6)),
                       None, None, names[int(rng.integers(0, 5))], None, None, names[int(rng.integers(0, 5))]]
                      for _ in range(int(rng.integers(1, 6)))]
        summaries.append([rank, int(rng.integers(0, 3)), aggregates, 0])
    return kernel_chunk(summaries)


def test_a_kernel_chunks_names_travel_once_each_and_number_as_the_lists_do() -> None:
    """The name columns of a kernel chunk cross as their distinct names plus a code per aggregate; the
    engine's name table numbers them as it numbers the lists (same codes, names added in the same order)."""
    from streams.detect.combine.chunks import Coded
    from streams.detect.windows.step_frames import NameTable

    rng = np.random.default_rng(5)
    for _ in range(200):
        chunk = _random_kernel_chunk(rng)
        raw = dumps(chunk)
        back = loads(raw)
        for name in ("key", "cat", "domain", "direction"):
            column = back[name]  # type: ignore[literal-required]
            assert isinstance(column, Coded) and column == chunk[name]  # type: ignore[literal-required]
            assert len(column.names) == len(set(chunk[name]))  # type: ignore[literal-required]
        shared, listed = NameTable(["old"], {"old": 0}), NameTable(["old"], {"old": 0})
        for _ in range(2):  # a second chunk finds the names there already
            a, b = shared.rows(back), listed.rows(chunk)
            for field in ("rank", "key", "cat", "domain", "direction", "total_ns"):
                assert getattr(a, field).tolist() == getattr(b, field).tolist(), field
        assert shared.names == listed.names and shared.index == listed.index


def test_a_coded_column_with_codes_outside_its_names_is_a_value_error() -> None:
    raw = dumps(kernel_chunk([[1, 3, [["mm", "compute", 1, 1000], ["ar", "comm", 1, 10]], 0]]))
    assert b'"_coded"' in raw
    with pytest.raises(ValueError):
        loads(raw.replace(b'"key":["mm","ar"]', b'"key":["mm"]   ', 1))


def test_a_part_of_a_coded_column_is_framed_with_only_its_own_names() -> None:
    from streams.detect.combine.chunks import _part

    chunk = kernel_chunk([[0, 3, [["mm", "compute", 1, 1000]], 0], [1, 3, [["ar", "comm", 1, 10]], 0]])
    back = loads(dumps(chunk))
    second = loads(dumps(_part(back, 1, 2)))  # type: ignore[arg-type]
    assert second["key"].names == ["ar"] and list(second["key"]) == ["ar"]  # type: ignore[attr-defined]


def test_a_chunk_over_the_limit_is_framed_once_whole_and_once_per_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut at once into the parts its size asks for: halving again and again framed a 10,240-rank step's
    chunk three times over (whole, halves, quarters), the decode stage's largest codec cost."""
    from streams.detect.combine import chunks

    calls: list[int] = []
    frame = chunks._frame
    monkeypatch.setattr(chunks, "_frame", lambda chunk: calls.append(1) or frame(chunk))
    chunk = kernel_chunk([[r, 0, [[f"k{i % 7}", "compute", 1, 10 + i] for i in range(4)], 0] for r in range(2000)])
    whole = len(dumps(chunk))
    calls.clear()
    parts = dumps_split(chunk, limit=whole // 3)
    assert len(parts) == 4 and all(len(p) <= whole // 3 for p in parts)
    assert len(calls) == 1 + len(parts)
    back = [loads(p) for p in parts]
    assert [r for b in back for r in b["rank"].tolist()] == list(range(2000))
    assert [k for b in back for k in b["key"]] == list(chunk["key"])


def test_a_parts_names_are_those_its_rows_use_in_order_of_first_appearance() -> None:
    from streams.detect.combine.chunks import Coded, _own_names

    rng = np.random.default_rng(7)
    names = [f"n{i}" for i in range(12)]
    for _ in range(50):
        whole = Coded.of([names[i] for i in rng.integers(0, 12, size=int(rng.integers(0, 40))).tolist()])
        lo = int(rng.integers(0, len(whole) + 1))
        part = whole[lo:]
        own = _own_names(part)
        assert own.names == Coded.of(list(part)).names and list(own) == list(part)


def test_a_split_chunk_that_does_not_fit_its_frame_goes_as_json_with_its_names() -> None:
    chunk = kernel_chunk([[r, 3, [["mm", "compute", 1, 1000]], 0] for r in range(40)])
    chunk["total_ns"] = [2**63] * 40  # past int64: no frame for any part
    parts = dumps_split(chunk, limit=1_500)
    assert len(parts) > 1 and all(p[:1] == b"{" for p in parts)
    assert [k for p in parts for k in loads(p)["key"]] == ["mm"] * 40
