"""What a detect snapshot costs to encode, by zstd level: `python -m bench.snapshot [--ranks 6400]`.

The detect worker encodes each changed job's engine about once a second, under its lock
(`streams/detect/state/`): the SLD1 document (a walk of the engine's state into msgpack, its arrays
as they lie in memory), then zstd. This plays the throughput bench's job (12 steps, a GC pause at
step 5) into a fresh engine, as the worker would, then times the document, each candidate zstd
level's compress and decompress on it (minimum CPU time of `--rounds`), with the compressed size,
and `encode` as the worker calls it (the level in `ZSTD_LEVEL`). Beside it, for comparison, the
pickle of the same state: the format SLD1 replaced.

Results -> bench/results/snapshot.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import pickle
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zstandard

from bench.detect_split import batches, decoded, over_the_wire, play
from bench.provenance import git_commit, machine
from streams.detect.engine import JobEngine
from streams.detect.state.format import ZSTD_LEVEL, document
from streams.detect.state.outbox import Outbox
from streams.detect.state.store import decode_snapshot, encode

RESULTS = Path(__file__).resolve().parent / "results" / "snapshot.json"
LEVELS = (3, 1, -1, -5, -10)


def played(ranks: int, steps: int) -> JobEngine:
    """The throughput bench's job after `steps` steps, through decode, the chunk codec and the engine."""
    (engine,) = play(over_the_wire(decoded(batches(ranks, steps)))).jobs.values()
    return engine


def best_ms(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return round(best * 1e3, 2)


def measure(engine: JobEngine, rounds: int) -> dict[str, Any]:
    state = (engine, Outbox(engine.job))
    pickled = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    raw = b"".join(document(engine))
    levels: dict[str, dict[str, float]] = {}
    for level in LEVELS:
        compressor, decompressor = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
        packed = compressor.compress(raw)
        levels[str(level)] = {
            "compress_ms": best_ms(functools.partial(compressor.compress, raw), rounds),
            "decompress_ms": best_ms(functools.partial(decompressor.decompress, packed), rounds),
            "mb": round(len(packed) / 1e6, 3),
        }
    snapshot = encode(engine)
    restored = decode_snapshot(snapshot)
    if restored is None or restored[0].job != engine.job:
        raise RuntimeError("the encoded snapshot does not restore")
    return {"document_ms": best_ms(lambda: document(engine), rounds), "document_mb": round(len(raw) / 1e6, 3),
            "pickle_ms": best_ms(lambda: pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), rounds),
            "pickle_mb": round(len(pickled) / 1e6, 3), "levels": levels, "zstd_level": ZSTD_LEVEL,
            "encode_ms": best_ms(lambda: encode(engine), rounds), "encoded_mb": round(len(snapshot) / 1e6, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.snapshot")
    parser.add_argument("--ranks", type=int, default=6400)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = {"ranks": args.ranks, "steps": args.steps, "rounds": args.rounds,
              **measure(played(args.ranks, args.steps), args.rounds),
              "machine": machine(), "started": started, "git": git_commit()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.ranks} ranks: document {result['document_ms']} ms ({result['document_mb']} MB), "
          f"encode at level {ZSTD_LEVEL}: {result['encode_ms']} ms ({result['encoded_mb']} MB); "
          f"pickle of the same state {result['pickle_ms']} ms ({result['pickle_mb']} MB)")
    for level, row in result["levels"].items():
        print(f"  zstd {level:>4}: compress {row['compress_ms']:6.2f} ms, decompress {row['decompress_ms']:5.2f} ms, "
              f"{row['mb']} MB")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
