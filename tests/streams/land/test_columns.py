"""The columnar landing path lands exactly what the per-event path lands: rows, tokens, dead letters.

Batches of simulator records (faults included) and of hand-built bad records (the detect side's
set) go through `LandingProcessor.process_batch` with and without the columnar path, then through a
`BatchingWriter`: the inserts (table, dedup token, rows) and the dead letters must be identical, and
landed into two embedded stores the tables' contents too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest

from producers.simulator.catalogue import scenario_job
from producers.simulator.stream import SimRun, stream_runs
from schemas import Topics
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import DEAD_LETTERS_TABLE, STEPS_TABLE
from sinks.writer import BatchingWriter
from streams.land.processor import DeadLetter, Landed, LandingProcessor
from tests.sinks.fakes import FakeBackend
from tests.streams.detect.ingest.test_decode_columns import BAD_RECORDS, MUTANTS, _pack, _step

TOPICS = Topics("")
MAX = 1 << 20


def _clean(rank: int, **over: Any) -> dict[str, Any]:
    """A step the fast mapping lands (the detect tests' `_step` has a negative phase, a dead letter here)."""
    return _step(rank, **{"phases": {"forward_ms": 1.5, "backward_ms": 3}, **over})


class Msg(NamedTuple):
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


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_a_hand_built_record_lands_alike(name: str) -> None:
    good = [_pack(_clean(0), _clean(1)), _pack(_clean(2), _clean(3))]
    assert _alike(_msgs(good)) == 1
    _alike(_msgs([good[0], BAD_RECORDS[name], good[1]]))


def test_random_mutations_land_alike() -> None:
    import random

    rng = random.Random(2)
    fields = ["type", "v", "job", "rank", "world", "host", "device", "step", "start_ns", "end_ns", "attempt",
              "samples", "batch_size", "gc_count", "tokens", "phases", "domains", "flops", "peak_flops", "profiling"]
    for _ in range(300):
        docs = [_clean(r, profiling=True, gc_count=3, flops=2.0) for r in range(4)]
        target = docs[rng.randrange(4)]
        name = rng.choice(fields)
        if rng.random() < 0.2:
            target.pop(name, None)
        else:
            target[name] = rng.choice(MUTANTS)
        _alike(_msgs([_pack(*docs[:2]), _pack(*docs[2:])]))


def test_a_clean_batch_lands_as_one_block() -> None:
    batch = _msgs([_pack(_clean(0), _clean(1)), _pack(_clean(2), _clean(3))])
    out, processor = _land(batch, columnar=True)
    assert (len(out.blocks), out.rows, processor.counts) == (1, [], {"step": 4})
    assert out.blocks[0].spans == ((TOPICS.steps, 0, 0, 0), (TOPICS.steps, 1, 1, 1))


def _contents(path: Path, batches: list[list[Msg]], columnar: bool) -> list[list[tuple[Any, ...]]]:
    backend = EmbeddedBackend(path)
    try:
        migrate(backend)
        for batch in batches:
            out, _ = _land(batch, columnar)
            _write(out, backend)
            _write(out, backend)  # a retry of the same blocks: dropped by their tokens
        return [backend.query(f"SELECT * FROM {backend.database}.{table} ORDER BY ALL")
                for table in (STEPS_TABLE, DEAD_LETTERS_TABLE)]
    finally:
        backend.close()


def test_embedded_stores_hold_the_same_tables(tmp_path: Path) -> None:
    messages = [m for m in _simulated("hung_rank") if m.topic == TOPICS.steps]
    bad = _msgs([BAD_RECORDS["rank-outside-world"], BAD_RECORDS["null-host"]], first=len(messages))
    batches = [messages[:40], messages[40:] + bad]
    old = _contents(tmp_path / "old", batches, columnar=False)
    new = _contents(tmp_path / "new", batches, columnar=True)
    assert old == new and len(old[0]) > 0 and len(old[1]) > 0
