"""`python -m bench.record_reader`: a fetched record batch's records read by kafka-python and by the workers' C reader.

One step of the throughput bench's job (`bench.throughput.Job`: packed records, one per host and topic) is built into
record batches as its producer cuts them (up to 1 MB a batch) and read with kafka-python's own `DefaultRecordBatch`
and with `infra.kafka_records.CRecordBatch`, alternated, the best of `--rounds` each (CPU time of this thread). The
same records come out of both (checked). -> bench/results/record-reader.json
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from bench.provenance import git_commit, machine
from bench.throughput import T0_NS, Job
from infra.kafka_records import CRecordBatch

RESULTS = Path(__file__).resolve().parent / "results" / "record-reader.json"
BATCH_BYTES = 1 << 20  # the throughput bench's producer's batch_size


def batches(ranks: int) -> tuple[list[bytes], int, int]:
    """(record batches, records, events) of one step of a `ranks`-rank job, every topic's records together."""
    job = Job("reader", ranks)
    records = job.step(0, 0.0, packed=True, device_ts_ns=T0_NS)
    def new() -> Any:
        return DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                         producer_epoch=-1, base_sequence=-1, batch_size=BATCH_BYTES)

    out: list[bytes] = []
    builder, first = new(), 0
    for offset, (_, key, value) in enumerate(records):
        # kafka-python's builder refuses (None) a record that would take a started batch past its size
        if builder.append(offset - first, timestamp=1_767_225_600_000, key=key, value=value, headers=[]) is None:
            out.append(bytes(builder.build()))
            builder, first = new(), offset
            builder.append(0, timestamp=1_767_225_600_000, key=key, value=value, headers=[])
    out.append(bytes(builder.build()))
    return out, len(records), 3 * job.world  # a step, a kernel summary and a device sample per rank


def read_all(cls: type[DefaultRecordBatch], data: list[bytes]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for buf in data for r in cls(buf)]


def best_s(cls: type[DefaultRecordBatch], data: list[bytes], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for buf in data:
            for _record in cls(buf):
                pass
        best = min(best, time.thread_time() - t)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.record_reader")
    parser.add_argument("--ranks", type=int, default=10240)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    data, records, events = batches(args.ranks)
    if read_all(CRecordBatch, data) != read_all(DefaultRecordBatch, data):
        raise RuntimeError("the C reader and kafka-python's read different records")
    plain = c = float("inf")
    for _ in range(3):  # alternated: the box's speed drifts
        plain = min(plain, best_s(DefaultRecordBatch, data, args.rounds))
        c = min(c, best_s(CRecordBatch, data, args.rounds))
    result = {
        "ranks": args.ranks, "records": records, "events": events, "batches": len(data),
        "bytes": sum(len(b) for b in data), "rounds": args.rounds,
        "kafka_python_us_per_record": round(plain / records * 1e6, 3), "c_us_per_record": round(c / records * 1e6, 3),
        "kafka_python_us_per_event": round(plain / events * 1e6, 3), "c_us_per_event": round(c / events * 1e6, 3),
        "c_over_kafka_python": round(c / plain, 3),
        "machine": machine(), "started": started, "git": git_commit()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.ranks} ranks, one step: {records} records ({events} events) in {len(data)} batches; "
          f"kafka-python {result['kafka_python_us_per_record']} µs/record ({result['kafka_python_us_per_event']} "
          f"µs/event), C {result['c_us_per_record']} µs/record ({result['c_us_per_event']} µs/event) -> {args.out}")


if __name__ == "__main__":
    main()
