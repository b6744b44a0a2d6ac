"""CPU per event of decoding packed records: today's orjson paths vs pyarrow's JSON reader, vs plain orjson.

Issue #25 asks to decode packed records to typed columns in C instead of building a dict per
event; this measures the candidate before anything on the hot path changes. One process, the
same records (`bench.throughput.Job`'s packed records: one host's events of one topic per
record), each method timed on them in turn, round after round (interleaved, so load on the
shared box hits every method alike), in CPU time of this process:

- `orjson_ceiling`: `orjson.loads` per record and nothing else (what the throughput bench's
  plain consumer pays per event, less Kafka);
- `detect_decode`: `streams.detect.ingest.decode.decode_batch` (today's detect decode: dicts, checks,
  per-job lists);
- `land_rows`: `streams.land.processor.LandingProcessor.process` (today's landing: dicts, the fast
  mapping's checks, one row tuple per event); `land_rows_arrow` adds turning those rows into
  Arrow arrays, one per column (types inferred: what an Arrow insert needs at least);
- `arrow_columns`: the batch as one NDJSON buffer (`{"e": <record>}` per line), read by
  `pyarrow.json.read_json` with an explicit schema on one thread, the element lists flattened,
  the contract's range checks done on the columns with numpy, and the columns detection keeps
  as numpy arrays (`arrow_read`: the read and the flattening alone). Unknown fields are
  ignored (as detect does); a value of the wrong JSON type fails the whole block, where a hot
  path would take today's path for that batch (not measured here).

`python -m bench.decode_columns [--ranks 2048 --steps 20 --rounds 7 --out PATH]`; prints a
table and writes JSON (default: no file).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from bench.detect_split import interleave
from bench.provenance import git_commit, machine
from bench.throughput import Job
from schemas import Topics
from schemas.bounds import INT64, UINT16, UINT32
from schemas.device import METRICS
from schemas.identity import DOMAIN_TYPES
from schemas.step import Phases
from streams.detect.ingest.decode import decode_batch
from streams.land.arrow_read import IDENTITY
from streams.land.processor import Landed, LandingProcessor

I64, U32, U16 = INT64[1], UINT32[1], UINT16[1]
STEP = pa.struct([*IDENTITY, ("step", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
                  ("phases", pa.struct([(p, pa.float64()) for p in Phases.NAMES])),
                  ("batch_size", pa.int64()), ("samples", pa.int64())])
_ENTRY = pa.struct([("key", pa.string()), ("cat", pa.string()), ("count", pa.int64()), ("total_ns", pa.int64()),
                    ("max_ns", pa.int64()), ("flops", pa.float64()), ("op", pa.string()), ("domain", pa.string()),
                    ("bytes", pa.int64()), ("direction", pa.string()), ("launch_mean_us", pa.float64()),
                    ("launch_mad_us", pa.float64())])
SUMMARY = pa.struct([*IDENTITY, ("step", pa.int64()), ("other_ns", pa.int64()), ("entries", pa.list_(_ENTRY))])
DEVICE = pa.struct([("type", pa.string()), ("v", pa.string()), ("host", pa.string()), ("device", pa.int64()),
                    ("ts_ns", pa.int64()), ("job", pa.string()), ("rank", pa.int64()),
                    *[(m, pa.float64()) for m in METRICS]])
SCHEMAS = {"steps": STEP, "kernels": SUMMARY, "device": DEVICE}


def _read(raws: list[bytes], element: pa.DataType) -> tuple[dict[str, Any], np.ndarray[Any, Any]]:
    """One NDJSON buffer -> the flattened elements' fields (Arrow arrays) and each record's element count."""
    buf = b"".join([b'{"e":' + raw + b"}\n" for raw in raws])
    table = pj.read_json(pa.BufferReader(buf),
                         read_options=pj.ReadOptions(use_threads=False, block_size=len(buf) + 1),
                         parse_options=pj.ParseOptions(explicit_schema=pa.schema([("e", pa.list_(element))]),
                                                       unexpected_field_behavior="ignore"))
    lists = table.column("e").combine_chunks()
    events = lists.flatten()
    fields = {f.name: events.field(i) for i, f in enumerate(element)}
    return fields, pc.list_value_length(lists).to_numpy(zero_copy_only=False)


def _i(array: pa.Array, fill: int = -1) -> np.ndarray[Any, Any]:
    return np.asarray(pc.fill_null(array, fill).to_numpy(zero_copy_only=False))


def _f(array: pa.Array) -> np.ndarray[Any, Any]:
    return np.asarray(array.to_numpy(zero_copy_only=False))  # nulls -> NaN for floats


def _header_ok(f: dict[str, Any], kind: str) -> np.ndarray[Any, Any]:
    ok = pc.fill_null(pc.and_(pc.equal(f["type"], kind), pc.starts_with(f["v"], "1.")), False)
    return np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)


def _identity_ok(f: dict[str, Any], kind: str) -> tuple[np.ndarray[Any, Any], dict[str, np.ndarray[Any, Any]]]:
    rank, world, step = _i(f["rank"]), _i(f["world"]), _i(f["step"])
    attempt = _i(f["attempt"], 0)
    job_ok = np.asarray(pc.fill_null(pc.greater(pc.utf8_length(f["job"]), 0), False).to_numpy(zero_copy_only=False),
                        dtype=bool)
    ok = (_header_ok(f, kind) & job_ok & (rank >= 0) & (rank < world) & (world <= U32)
          & (step >= 0) & (attempt >= 0) & (attempt <= U16))
    return ok, {"rank": rank, "world": world, "step": step, "attempt": attempt}


def arrow_steps(raws: list[bytes]) -> int:
    f, _ = _read(raws, STEP)
    ok, cols = _identity_ok(f, "step")
    start, end = _i(f["start_ns"]), _i(f["end_ns"])
    ok &= (start > 0) & (start <= end)
    phases = f["phases"]
    cols.update(start_ns=start, end_ns=end, samples=_f(f["samples"]), batch=_f(f["batch_size"]))
    for i, name in enumerate(Phases.NAMES):
        cols[name] = _f(phases.field(i))
    domains = f["domains"]
    for i, dom in enumerate(DOMAIN_TYPES):
        d = domains.field(i)
        cols[f"g_{dom}"], cols[f"n_{dom}"] = _i(d.field(0)), _i(d.field(1), 0)
    cols["stage"] = _i(domains.field(DOMAIN_TYPES.index("pp")).field(2))
    keep = np.flatnonzero(ok)
    columns = {name: v[keep] for name, v in cols.items()}  # the accepted events' columns
    return len(columns["rank"])


def arrow_summaries(raws: list[bytes]) -> int:
    f, _ = _read(raws, SUMMARY)
    ok, cols = _identity_ok(f, "kernel_summary")
    entries = f["entries"]
    ok &= np.asarray(pc.is_valid(entries).to_numpy(zero_copy_only=False), dtype=bool)
    flat = entries.flatten()
    per_event = pc.list_value_length(entries).to_numpy(zero_copy_only=False)
    entry_cols = {fld.name: flat.field(i) for i, fld in enumerate(_ENTRY)}
    bad_entry = (pc.is_null(entry_cols["key"]).to_numpy(zero_copy_only=False)
                 | pc.is_null(entry_cols["total_ns"]).to_numpy(zero_copy_only=False))
    owner = np.repeat(np.arange(len(per_event)), np.nan_to_num(per_event).astype(np.int64))
    ok[owner[bad_entry]] = False
    cols.update(total_ns=_i(entry_cols["total_ns"]), count=_i(entry_cols["count"], 0), flops=_f(entry_cols["flops"]),
                bytes=_f(entry_cols["bytes"]), launch=_f(entry_cols["launch_mean_us"]), owner=owner)
    return int(ok.sum())  # events (the entries' columns are in `cols`)


def arrow_device(raws: list[bytes]) -> int:
    f, _ = _read(raws, DEVICE)
    device, ts = _i(f["device"]), _i(f["ts_ns"])
    host_ok = np.asarray(pc.fill_null(pc.greater(pc.utf8_length(f["host"]), 0), False).to_numpy(zero_copy_only=False),
                         dtype=bool)
    ok = _header_ok(f, "device") & host_ok & (device >= 0) & (device <= U16) & (ts > 0)
    cols = {m: _f(f[m]) for m in METRICS}
    cols.update(device=device, ts_ns=ts, rank=_i(f["rank"]))
    return int(ok.sum())


ARROW: dict[str, Callable[[list[bytes]], int]] = {"steps": arrow_steps, "kernels": arrow_summaries,
                                                  "device": arrow_device}


def records(ranks: int, steps: int) -> dict[str, list[bytes]]:
    """The throughput bench's packed records, by topic kind."""
    job = Job(f"bench-{ranks}", ranks)
    out: dict[str, list[bytes]] = {"steps": [], "kernels": [], "device": []}
    for s in range(steps):
        for kind, _, value in job.step(s, 300.0 if s % 10 == 5 else 0.0):
            out[kind].append(value)
    return out


def methods(kind: str, raws: list[bytes]) -> dict[str, Callable[[], int]]:
    """Each method over one topic's records, returning the events it accepted (checked against the others)."""
    topics = Topics("bench.")
    topic = {"steps": topics.steps, "kernels": topics.kernel_summaries, "device": topics.device}[kind]
    processor = LandingProcessor(topics, 1 << 20)

    def ceiling() -> int:
        n = 0
        for raw in raws:
            doc = orjson.loads(raw)
            n += len(doc) if type(doc) is list else 1
        return n

    def detect() -> int:
        _, stats = decode_batch(raws, 1 << 20)
        return stats.events - stats.bad

    def land() -> Landed:
        out = Landed()
        now = time.time_ns()
        for offset, raw in enumerate(raws):
            processor.process(topic, 0, offset, b"k", raw, now, out)
        return out

    def land_rows() -> int:
        return len(land().rows)  # kernel summaries: one row per entry

    def land_rows_arrow() -> int:
        out = land()
        by_table: dict[str, list[Any]] = {}
        for row in out.rows:
            by_table.setdefault(row.table, []).append(row.row)
        for rows in by_table.values():
            _ = [pa.array(list(col)) for col in zip(*rows, strict=True)]
        return len(out.rows)

    arrow = ARROW[kind]
    return {"orjson_ceiling": ceiling, "detect_decode": detect, "land_rows": land_rows,
            "land_rows_arrow": land_rows_arrow, "arrow_read": lambda: len(_read(raws, SCHEMAS[kind])[0]["type"]),
            "arrow_columns": lambda: arrow(raws)}


def measure(kind: str, raws: list[bytes], events: int, rounds: int) -> dict[str, Any]:
    """CPU-µs per event of each method: median and min over `rounds` interleaved rounds."""
    runs = methods(kind, raws)
    # warm-up (imports, caches, the first allocation of every arena), which also says what each method accepted
    accepted: dict[str, int] = {name: fn() for name, fn in runs.items()}
    times = interleave(runs, events, rounds, warm_up=False)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {
        "records": len(raws), "events": events, "bytes_per_event": round(sum(map(len, raws)) / events, 1),
        "accepted": accepted,
        "us_per_event": {name: round(v, 3) for name, v in med.items()},
        "us_per_event_min": {name: round(min(v), 3) for name, v in times.items()},
        "ratio_to_ceiling": {name: round(med["orjson_ceiling"] / v, 3) for name, v in med.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.decode_columns")
    parser.add_argument("--ranks", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    gc.set_threshold(50_000, 20, 100)  # as the workers run (streams.gc_tuning)
    gc.freeze()
    by_kind = records(args.ranks, args.steps)
    events = {kind: args.ranks * args.steps for kind in by_kind}
    result = {kind: measure(kind, raws, events[kind], args.rounds) for kind, raws in by_kind.items()}
    out = {"ranks": args.ranks, "steps": args.steps, "rounds": args.rounds, "pyarrow": pa.__version__,
           "orjson": orjson.__version__, "kinds": result, "machine": machine(), "git": git_commit()}
    names = list(next(iter(result.values()))["us_per_event"])
    print("| topic | B/event | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names))
    for kind, r in result.items():
        cells = [f"{r['us_per_event'][n]:.2f} ({r['ratio_to_ceiling'][n]:.2f})" for n in names]
        print(f"| {kind} | {r['bytes_per_event']} | " + " | ".join(cells) + " |")
    print("CPU-µs per event, median of rounds (ceiling µs ÷ method µs); accepted per method:",
          {k: r["accepted"] for k, r in result.items()})
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
