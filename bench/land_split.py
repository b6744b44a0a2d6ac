"""Where the land worker's CPU goes per step event, without Kafka: row building old vs columnar, and the insert.

Issue #25: landing costs ~4× a plain consumer per event. This times, on the throughput bench's packed
step records (`--kind device`: device samples; `--kind kernels`: kernel summaries, two aggregates each, so
two rows an event) of `bench.throughput.Job`, one batch per step, and an embedded store in a temporary
directory:

- `ceiling`: `orjson.loads` per record (what a plain consumer pays, less Kafka);
- `rows_old`: `LandingProcessor.process` per record (a row tuple per event) and the embedded
  backend's Arrow encoding of the tuples (`_ArrowStream.encode`);
- `rows_new`: `LandingProcessor.process_batch` (one Arrow block per batch) and its encoding
  (`_ArrowStream.encode_table`);
- `insert`: chdb loading the encoded block (unchanged by either path).

Rounds interleave the stages; medians of CPU time of this process per event.

`--server URL` times the insert into a ClickHouse server instead (`sinks.server.ServerBackend`, a
database of its own, dropped at the end): each batch's step block and device block (both kinds, one
4,096-rank batch per step by default), built once beforehand, inserted

- `insert_rows`: as rows (`arrow_rows`: a Python tuple per event, what the writer sent before the
  server took Arrow blocks);
- `insert_columns`: `insert_arrow` with a Python list per column (`ServerBackend(numpy=False)`);
- `insert_numpy`: `insert_arrow` with numpy arrays (clickhouse-driver's ``use_numpy``; the default);

beside the `orjson.loads` ceiling on the same records. CPU of this process per event; with
`--server-pid` also the server process's CPU per event over the same stage (from /proc).

`python -m bench.land_split [--ranks 4096 --steps 10 --rounds 5 --kind step|device|kernels]`
`python -m bench.land_split --server clickhouse://user:pw@host:port [--server-pid PID] [--ranks --steps --rounds]`
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from bench.detect_split import interleave
from bench.throughput import Job
from schemas import Topics
from sinks.backend import arrow_rows, quote_identifier
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.rows import (
    DEVICE_SAMPLE_COLUMNS,
    DEVICE_SAMPLES_TABLE,
    KERNEL_SUMMARIES_TABLE,
    KERNEL_SUMMARY_COLUMNS,
    STEP_COLUMNS,
    STEPS_TABLE,
)
from sinks.server import ServerBackend
from sinks.writer import Block
from streams.land.processor import Landed, LandingProcessor

TOPICS = Topics("bench")


@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


# --kind -> (its topic, table, columns, the event type its records carry)
KINDS = {"step": (TOPICS.steps, STEPS_TABLE, STEP_COLUMNS, "step"),
         "device": (TOPICS.device, DEVICE_SAMPLES_TABLE, DEVICE_SAMPLE_COLUMNS, "device"),
         "kernels": (TOPICS.kernel_summaries, KERNEL_SUMMARIES_TABLE, KERNEL_SUMMARY_COLUMNS, "kernel_summary")}


def batches(ranks: int, steps: int, kind: str = "step") -> list[list[Message]]:
    """One batch per step: that step's packed records of `kind`, on 4 partitions."""
    job = Job(f"land-{ranks}", ranks)
    topic, _, _, event_type = KINDS[kind]
    head = b'[{"type":"' + event_type.encode() + b'"'
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
    _, table, columns, _ = KINDS[kind]
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


def blocks(data: list[list[Message]]) -> list[Block]:
    """Each batch's Arrow block (`process_batch`), in batch order."""
    proc = LandingProcessor(TOPICS, 1 << 22)
    out: list[Block] = []
    for batch in data:
        landed = Landed()
        proc.process_batch(batch, 1, landed)
        assert not landed.rows and len(landed.blocks) == 1
        out.extend(landed.blocks)
    return out


def server_stages(data: list[list[Message]], numpy: ServerBackend,
                  lists: ServerBackend) -> dict[str, Callable[[], None]]:
    """The ceiling and the three ways of inserting the batches' blocks (`data`: step and device batches)."""
    built = blocks(data)

    def ceiling() -> None:
        for batch in data:
            for m in batch:
                orjson.loads(m.value or b"")

    def insert_rows() -> None:
        for block in built:
            numpy.insert(block.table, block.columns, arrow_rows(block.data))

    def insert_columns() -> None:
        for block in built:
            lists.insert_arrow(block.table, block.columns, block.data)

    def insert_numpy() -> None:
        for block in built:
            numpy.insert_arrow(block.table, block.columns, block.data)

    return {"ceiling": ceiling, "insert_rows": insert_rows, "insert_columns": insert_columns,
            "insert_numpy": insert_numpy}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    import os
    from pathlib import Path

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleave_server(runs: dict[str, Callable[[], None]], events: int, rounds: int,
                      pid: int | None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """As `bench.detect_split.interleave`, and the server's CPU-µs per event of each run (when `pid`)."""
    client: dict[str, list[float]] = {name: [] for name in runs}
    server: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            gc.collect()
            s0 = _cpu_s(pid) if pid else 0.0
            t = time.process_time()
            fn()
            client[name].append((time.process_time() - t) / events * 1e6)
            if pid:
                server[name].append((_cpu_s(pid) - s0) / events * 1e6)
    return client, server


def main_server(args: argparse.Namespace) -> None:
    data = batches(args.ranks, args.steps, "step") + batches(args.ranks, args.steps, "device")
    events = sum(len(orjson.loads(m.value or b"")) for batch in data for m in batch)
    database = f"bench_land_{uuid.uuid4().hex[:8]}"
    numpy = ServerBackend(args.server, database)
    lists = ServerBackend(args.server, database, numpy=False)
    try:
        migrate(numpy)
        client, server = interleave_server(server_stages(data, numpy, lists), events, args.rounds,
                                           args.server_pid)
        assert numpy.inserts_by_kind.keys() == {"rows", "numpy"} and lists.inserts_by_kind.keys() == {"columns"}
    finally:
        lists.close()
        numpy.execute(f"DROP DATABASE IF EXISTS {quote_identifier(database)}")
        numpy.close()
    print(f"{args.ranks} ranks x {args.steps} steps (step + device blocks, {events} events), server "
          f"{'.'.join(map(str, numpy.version()))}, {args.rounds} rounds: CPU-µs per event")
    medians = {name: statistics.median(v) for name, v in client.items()}
    for name, v in client.items():
        line = f"  {name:15s} median {medians[name]:7.3f}  min {min(v):7.3f}  all {[round(x, 2) for x in v]}"
        if server[name]:
            line += f"  | server median {statistics.median(server[name]):7.3f}"
        print(line)
    print(f"  rows / numpy: {medians['insert_rows'] / medians['insert_numpy']:.2f}x, rows / columns: "
          f"{medians['insert_rows'] / medians['insert_columns']:.2f}x, ceiling / numpy: "
          f"{medians['ceiling'] / medians['insert_numpy']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.land_split")
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kind", choices=sorted(KINDS), default="step")
    parser.add_argument("--server", help="clickhouse:// URL: time the server inserts instead (both kinds)")
    parser.add_argument("--server-pid", type=int, help="with --server: also the server process's CPU")
    args = parser.parse_args(argv)
    gc.set_threshold(50_000, 20, 100)  # as the workers run (streams.gc_tuning)
    gc.freeze()
    if args.server:
        main_server(args)
        return
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
    print(f"{args.ranks} ranks x {args.steps} steps, {args.rounds} rounds: CPU-µs per {KINDS[args.kind][3]} event")
    for name, v in times.items():
        print(f"  {name:9s} median {result[name]:7.3f}  min {min(v):7.3f}  all {[round(x, 2) for x in v]}")
    print(f"  row building old/new: {result['rows_old'] / result['rows_new']:.2f}x")


if __name__ == "__main__":
    main()
