"""Where the land worker's CPU goes per step event, without Kafka: row building old vs columnar, and the insert.

Issue #25: landing costs ~4× a plain consumer per event. This times, on the throughput bench's packed
step records (`--kind device`: device samples) of `bench.throughput.Job`, one batch per step, and an
embedded store in a temporary directory:

- `ceiling`: `orjson.loads` per record (what a plain consumer pays, less Kafka);
- `rows_old`: `LandingProcessor.process` per record (a row tuple per event) and the embedded
  backend's Arrow encoding of the tuples (`_ArrowLayout.encode`);
- `rows_new`: `LandingProcessor.process_batch` (one Arrow block per batch) and its encoding
  (`_ArrowLayout.encode_table`);
- `insert`: chdb loading the encoded block (unchanged by either path).

Rounds interleave the stages; medians of CPU time of this process per event.

`python -m bench.land_split [--ranks 4096 --steps 10 --rounds 5 --kind step|device]`
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from bench.detect_split import interleave
from bench.throughput import Job
from schemas import Topics
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import DEVICE_SAMPLE_COLUMNS, DEVICE_SAMPLES_TABLE, STEP_COLUMNS, STEPS_TABLE
from streams.land.processor import Landed, LandingProcessor

TOPICS = Topics("bench")


@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


KINDS = {"step": (TOPICS.steps, STEPS_TABLE, STEP_COLUMNS),
         "device": (TOPICS.device, DEVICE_SAMPLES_TABLE, DEVICE_SAMPLE_COLUMNS)}


def batches(ranks: int, steps: int, kind: str = "step") -> list[list[Message]]:
    """One batch per step: that step's packed records of `kind`, on 4 partitions."""
    job = Job(f"land-{ranks}", ranks)
    topic = KINDS[kind][0]
    head = b'[{"type":"' + kind.encode() + b'"'
    out, offset = [], 0
    for s in range(steps):
        batch = []
        for _, key, value in job.step(s, 300.0 if s % 10 == 5 else 0.0):
            if value.startswith(head):
                batch.append(Message(topic, offset % 4, offset, key, value))
                offset += 1
        out.append(batch)
    return out


def stages(data: list[list[Message]], backend: EmbeddedBackend,
           kind: str = "step") -> dict[str, Callable[[], None]]:
    _, table, columns = KINDS[kind]
    layout = backend._layout(table, columns)
    assert layout is not None
    old = LandingProcessor(TOPICS, 1 << 22, columnar=False)
    new = LandingProcessor(TOPICS, 1 << 22)
    payloads: list[bytes] = []

    def ceiling() -> None:
        for batch in data:
            for m in batch:
                orjson.loads(m.value or b"")

    def rows_old() -> None:
        for batch in data:
            landed = Landed()
            for m in batch:
                old.process(m.topic, m.partition, m.offset, m.key, m.value, 1, landed)
            rows = [r.row for r in landed.rows if r.table == table]
            payload = layout.encode(rows)
            assert payload is not None

    def rows_new() -> None:
        for batch in data:
            landed = Landed()
            new.process_batch(batch, 1, landed)
            (block,) = landed.blocks
            payload = layout.encode_table(block.data)
            assert payload is not None and not landed.rows
            payloads.append(payload)

    def insert() -> None:
        for payload in payloads[-len(data):]:
            backend._send(f"INSERT INTO {backend.database}.{table}", "ArrowStream", payload, table, 0, None)

    return {"ceiling": ceiling, "rows_old": rows_old, "rows_new": rows_new, "insert": insert}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.land_split")
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kind", choices=sorted(KINDS), default="step")
    args = parser.parse_args(argv)
    gc.set_threshold(50_000, 20, 100)  # as the workers run (streams.gc_tuning)
    gc.freeze()
    data = batches(args.ranks, args.steps, args.kind)
    with tempfile.TemporaryDirectory() as tmp:
        backend = EmbeddedBackend(tmp)
        try:
            migrate(backend)
            events = sum(len(orjson.loads(m.value or b"")) for batch in data for m in batch)
            times = interleave(stages(data, backend, args.kind), events, args.rounds)
        finally:
            backend.close()
    result: dict[str, Any] = {name: statistics.median(v) for name, v in times.items()}
    print(f"{args.ranks} ranks x {args.steps} steps, {args.rounds} rounds: CPU-µs per {args.kind} event")
    for name, v in times.items():
        print(f"  {name:9s} median {result[name]:7.3f}  min {min(v):7.3f}  all {[round(x, 2) for x in v]}")
    print(f"  row building old/new: {result['rows_old'] / result['rows_new']:.2f}x")


if __name__ == "__main__":
    main()
