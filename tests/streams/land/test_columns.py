"""The columnar landing path lands exactly what the per-event path lands: rows, tokens, dead letters.

Batches of simulator records (faults included) and of hand-built bad records (the detect side's
set) go through `LandingProcessor.process_batch` with and without the columnar path, then through a
`BatchingWriter`: the inserts (table, dedup token, rows) and the dead letters must be identical, and
landed into two embedded stores the tables' contents too.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.settings import load_settings
from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from schemas.dead_letter import DeadLetter
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import DEAD_LETTERS_TABLE, DEVICE_SAMPLES_TABLE, STEPS_TABLE
from sinks.writer import BatchingWriter
from streams.land.processor import Landed, LandingProcessor
from tests.sinks.fakes import FakeBackend
from tests.streams.detect.ingest.test_decode_columns import BAD_RECORDS, MUTANTS, _device, _pack, _step

TOPICS = Topics("")
MAX = 1 << 20


def _clean(rank: int, **over: Any) -> dict[str, Any]:
    """A step the fast mapping lands (the detect tests' `_step` has a negative phase, a dead letter here)."""
    return _step(rank, **{"phases": {"forward_ms": 1.5, "backward_ms": 3}, **over})


@dataclass(slots=True)
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _land(batch: list[Msg], columnar: bool) -> tuple[Landed, LandingProcessor]:
    processor = LandingProcessor(TOPICS, MAX, columnar=columnar)
    out = Landed()
    processor.process_batch(batch, 77, out)
    return out, processor


def _write(out: Landed, backend: Any) -> None:
    writer = BatchingWriter(backend, 10**6, 60.0, 10**7)
    for row, source in zip(out.rows, out.sources, strict=True):
        writer.add_row(row, source)
    for block in out.blocks:
        writer.add_block(block)
    writer.flush()


def _inserts(batch: list[Msg], columnar: bool) -> tuple[list[Any], list[DeadLetter], dict[str, int], int]:
    out, processor = _land(batch, columnar)
    backend = FakeBackend()
    _write(out, backend)
    inserts = sorted(zip(backend.inserts, backend.tokens, strict=True), key=lambda x: x[0][0])
    return inserts, out.dead, processor.counts, len(out.blocks)


def _alike(batch: list[Msg]) -> int:
    """Asserts both paths give the same inserts, dead letters and counts; the number of blocks used."""
    old = _inserts(batch, columnar=False)
    new = _inserts(batch, columnar=True)
    assert old[3] == 0
    assert old[:3] == new[:3]
    return new[3]


def _msgs(raws: list[bytes | None], topic: str = TOPICS.steps, first: int = 0) -> list[Msg]:
    return [Msg(topic, i % 3, first + i, b"k", raw) for i, raw in enumerate(raws)]


def _simulated(scenario: str) -> list[Msg]:
    out: list[Msg] = []
    stream_runs([SimRun(scenario_job(scenario, ranks=32, steps=12, seed=3, job_id=f"j-{scenario}"))], TOPICS,
                lambda topic, key, value: out.append(Msg(topic, len(out) % 2, len(out), key, value)))
    return out


@pytest.mark.parametrize("scenario", ["healthy", "hung_rank", "dead_host", "bad_batch_size", "moe_imbalance"])
def test_simulator_batches_land_alike(scenario: str) -> None:
    messages = _simulated(scenario)
    blocks = sum(_alike(messages[i:i + 150]) for i in range(0, len(messages), 150))
    assert blocks > 0  # the columnar path did take batches


GOOD = {TOPICS.steps: [_pack(_clean(0), _clean(1)), _pack(_clean(2), _clean(3))],
        TOPICS.device: [_pack(_device(0), _device(1, device_kind="npu", freq_mhz=1800)), _pack(_device(2))]}


_BIG = {"world": 40_000}
# the edges of the landing's own ranges (ClickHouse column types, Date), beside the detect side's set
LAND_RECORDS: dict[str, bytes] = {
    "pp-stage-over-int16": _pack(_clean(39_999, **_BIG, domains={"pp": {"group": 0, "size": 40_000, "index": 39_999}})),
    "pp-stage-at-int16": _pack(_clean(39_999, **_BIG, domains={"pp": {"group": 0, "size": 40_000, "index": 32_767}})),
    "group-over-int32": _pack(_clean(0, domains={"dp": {"group": 2**31, "size": 4, "index": 0}})),
    "size-over-world": _pack(_clean(0, domains={"dp": {"group": 0, "size": 5, "index": 0}})),
    "job-too-long": _pack(_clean(0, job="j" * 1000)),
    "host-non-ascii": _pack(_clean(0, host="hôte-0")),
    "far-future": _pack(_clean(0, start_ns=2**63 - 10, end_ns=2**63 - 1)),
    "unknown-phase": _pack(_clean(0, phases={"think_ms": 1.0})),
    "negative-gc-count": _pack(_clean(0, gc_count=-1)),
    "float-tokens": _pack(_clean(0, tokens=1.5)),
    "all-optionals": _pack(_clean(0, gc_count=1, batch_size=2, samples=3, tokens=4, flops=5.5, peak_flops=6,
                                  profiling=False, attempt=3)),
    "memory": _pack(_clean(0, v="1.5", mem_peak_bytes=70 * 2**30, mem_reserved_bytes=80 * 2**30,
                           mem_capacity_bytes=96 * 2**30), _clean(1)),
    "memory-edges": _pack(_clean(0, mem_peak_bytes=0), _clean(1, mem_reserved_bytes=2**63 - 1)),
    "memory-null": _pack(_clean(0, mem_peak_bytes=None)),
    "memory-negative": _pack(_clean(0, mem_peak_bytes=-1)),
    "memory-float": _pack(_clean(0, mem_reserved_bytes=1.5)),
    "memory-huge": _pack(_clean(0)).replace(b'"start_ns"', b'"mem_peak_bytes":100000000000000000000,"start_ns"'),
    "device-percent-over": _pack(_device(0, aicore_pct=100.5)),
    "device-percent-at": _pack(_device(0, aicore_pct=100)),
    "device-negative-power": _pack(_device(0, power_w=-1.0)),
    "device-negative-temp": _pack(_device(0, temp_c=-5)),
    "device-negative-rank": _pack(_device(0, rank=-1)),
    "device-no-rank": _pack({k: v for k, v in _device(0).items() if k != "rank"}),
    "device-kind-too-long": _pack(_device(0, device_kind="k" * 1000)),
    "device-far-future": _pack(_device(0, ts_ns=2**63 - 1)),
}


@pytest.mark.parametrize("name", [*BAD_RECORDS, *LAND_RECORDS])
@pytest.mark.parametrize("topic", [TOPICS.steps, TOPICS.device])
def test_a_hand_built_record_lands_alike(name: str, topic: str) -> None:
    good = GOOD[topic]
    assert _alike(_msgs(good, topic)) == 1
    _alike(_msgs([good[0], BAD_RECORDS[name] if name in BAD_RECORDS else LAND_RECORDS[name], good[1]], topic))


STEP_FIELDS = ["type", "v", "job", "rank", "world", "host", "device", "step", "start_ns", "end_ns", "attempt",
               "samples", "batch_size", "gc_count", "tokens", "phases", "domains", "flops", "peak_flops", "profiling",
               "mem_peak_bytes", "mem_reserved_bytes", "mem_capacity_bytes"]
DEVICE_FIELDS = ["type", "v", "host", "device", "ts_ns", "job", "rank", "device_kind", "power_w", "temp_c",
                 "aicore_pct", "mem_pct", "freq_mhz"]


@pytest.mark.parametrize("topic", [TOPICS.steps, TOPICS.device])
def test_random_mutations_land_alike(topic: str) -> None:
    """One field of one element set to an odd value (or dropped), many times over: always the same landing."""
    rng = random.Random(2)
    columnar = 0
    for _ in range(300):
        if topic == TOPICS.steps:
            docs, fields = [_clean(r, profiling=True, gc_count=3, flops=2.0, mem_peak_bytes=2**30 + r,
                                   mem_reserved_bytes=2**31, mem_capacity_bytes=2**36) for r in range(4)], STEP_FIELDS
        else:
            docs, fields = [_device(d, device_kind="npu", mem_pct=50.0) for d in range(4)], DEVICE_FIELDS
        target = docs[rng.randrange(4)]
        name = rng.choice(fields)
        if rng.random() < 0.2:
            target.pop(name, None)
        else:
            target[name] = rng.choice([*MUTANTS, 101.0, 100, -0.5, "x" * 300])
        columnar += _alike(_msgs([_pack(*docs[:2]), _pack(*docs[2:])], topic))
    assert 0 < columnar < 300  # both paths taken


def test_a_clean_batch_lands_as_one_block() -> None:
    batch = _msgs([_pack(_clean(0), _clean(1)), _pack(_clean(2), _clean(3))])
    out, processor = _land(batch, columnar=True)
    assert (len(out.blocks), out.rows, processor.counts) == (1, [], {"step": 4})
    assert out.blocks[0].spans == ((TOPICS.steps, 0, 0, 0), (TOPICS.steps, 1, 1, 1))


def test_a_batch_with_memory_lands_as_one_block_with_its_memory() -> None:
    """Contract 1.5's memory is carried by the columnar path, not declined to the per-event one."""
    raws: list[bytes | None] = [LAND_RECORDS["memory"], LAND_RECORDS["memory-edges"]]
    batch = _msgs(raws)
    out, processor = _land(batch, columnar=True)
    assert (len(out.blocks), out.rows, processor.counts) == (1, [], {"step": 4})
    data = out.blocks[0].data
    assert data.column("mem_peak_bytes").to_pylist() == [70 * 2**30, None, 0, None]
    assert data.column("mem_reserved_bytes").to_pylist() == [80 * 2**30, None, None, 2**63 - 1]
    assert data.column("mem_capacity_bytes").to_pylist() == [96 * 2**30, None, None, None]
    assert _alike(batch) == 1


def test_a_device_batch_lands_as_one_block() -> None:
    out, processor = _land(_msgs(GOOD[TOPICS.device], TOPICS.device), columnar=True)
    assert (len(out.blocks), out.rows, processor.counts) == (1, [], {"device": 3})


def _contents(path: Path, batches: list[list[Msg]], columnar: bool) -> list[list[tuple[Any, ...]]]:
    backend = EmbeddedBackend(path)
    try:
        migrate(backend)
        for batch in batches:
            out, _ = _land(batch, columnar)
            _write(out, backend)
            _write(out, backend)  # a retry of the same blocks: dropped by their tokens
        return [backend.query(f"SELECT * FROM {backend.database}.{table} ORDER BY ALL")
                for table in (STEPS_TABLE, DEVICE_SAMPLES_TABLE, DEAD_LETTERS_TABLE)]
    finally:
        backend.close()


def test_embedded_stores_hold_the_same_tables(tmp_path: Path) -> None:
    messages = [m for m in _simulated("hung_rank") if m.topic == TOPICS.steps]
    now = time.time_ns()  # device samples live 90 days: the simulator's would be gone at once
    devices = _msgs([_pack(*[_device(d, ts_ns=now + 10**9 * r + d, rank=d) for d in range(8)]) for r in range(6)],
                    TOPICS.device, first=1000)
    bad = _msgs([BAD_RECORDS["rank-outside-world"], BAD_RECORDS["null-host"]], first=len(messages))
    bad += _msgs([BAD_RECORDS["device-nan"]], TOPICS.device, first=2000)
    batches = [messages[:40] + devices[:3], messages[40:] + devices[3:] + bad]
    old = _contents(tmp_path / "old", batches, columnar=False)
    new = _contents(tmp_path / "new", batches, columnar=True)
    assert old == new and all(old)


def test_a_declined_batch_sends_the_topic_s_next_batches_event_by_event() -> None:
    """The backoff: a declined read is paid for nothing, so the next `skip` batches of that topic skip it."""
    processor = LandingProcessor(TOPICS, MAX)
    good = _msgs(GOOD[TOPICS.steps])
    devices = _msgs(GOOD[TOPICS.device], TOPICS.device)
    blocks = []
    for batch in [good[:1] + _msgs([LAND_RECORDS["negative-gc-count"]], first=5) + devices, *[good + devices] * 9]:
        out = Landed()
        processor.process_batch(batch, 1, out)
        blocks.append(sorted(b.table for b in out.blocks))
    assert processor.declined == 1
    assert blocks == [[DEVICE_SAMPLES_TABLE]] * 9 + [[DEVICE_SAMPLES_TABLE, STEPS_TABLE]]


def test_the_columnar_landing_is_on_by_default_and_a_variable_turns_it_off() -> None:
    assert load_settings(env={}).land_columnar is True
    assert load_settings(env={"STEPLENS_LAND_COLUMNAR": "false"}).land_columnar is False
