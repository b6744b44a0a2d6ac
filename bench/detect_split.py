"""Where the detect worker's CPU goes per event, without Kafka: decode vs chunk codec vs engine.

Issue #25: detect costs ~5× a plain consumer per event. This splits that cost on the throughput
bench's packed records (`bench.throughput.Job`: one host's events of one topic per record), fed
as the decode loop gets them (one batch per step: its step, kernel-summary and device records)
through the same stages the worker runs:

- `ceiling`: `orjson.loads` per record (what a plain consumer pays, less Kafka);
- `decode`: `decode_batch` (records -> per-job column chunks; step, kernel-summary and device records
  decoded by msgspec into structs, then columns), and `decode_per_event`: the same with
  `columnar=False` (a dict per event);
- `codec`: `chunks.dumps_split` + `chunks.loads` (the internal partials topic, less Kafka);
- `engine`: `FleetEngine.on_chunk` for each chunk + one `tick` per batch.

Each round replays the whole job into a fresh engine; rounds interleave the stages, medians are
reported (CPU time of this process). `--profile` adds cProfile's top functions per stage.

`python -m bench.detect_split [--ranks 4096 --steps 20 --rounds 5 --profile]`
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import io
import pstats
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from bench.throughput import T0_NS, Job
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.decode import decode_batch

STEP_NS = 1_000_000_000


def batches(ranks: int, steps: int) -> list[list[bytes]]:
    """One batch per step: every packed record of that step (steps, summaries, device samples)."""
    job = Job(f"split-{ranks}", ranks)
    start = orjson.dumps({"type": "job", "v": "1.3", "job": job.job, "phase": "start", "world": job.world,
                          "ts_ns": T0_NS})
    out = [[value for _, _, value in job.step(s, 300.0 if s % 10 == 5 else 0.0, device_ts_ns=T0_NS + s * STEP_NS)]
           for s in range(steps)]
    out[0].insert(0, start)
    return out


def decoded(data: list[list[bytes]]) -> list[list[Any]]:
    """Each batch's chunks as the decode stage makes them, their progress fields zeroed (a run's wall clock
    must not reach the engine)."""
    out = [decode_batch(raws, 1 << 20)[0] for raws in data]
    for chunks in out:
        for chunk in chunks:
            chunk["behind_ns"], chunk["decoded_ns"], chunk["lag"], chunk["starved"] = 0, 0, 0, False
    return out


def over_the_wire(batches: list[list[Any]]) -> list[list[Any]]:
    """Each batch's chunks as the engine gets them: through `dumps_split` and `loads`."""
    return [[codec.loads(raw) for chunk in chunks for raw in codec.dumps_split(chunk)] for chunks in batches]


def play(loaded: list[list[Any]]) -> FleetEngine:
    """A fresh engine fed `loaded` (a batch a step, one tick after each), as `bench.throughput` paces a job."""
    fleet = FleetEngine(DetectionConfig())
    now = T0_NS
    for chunks in loaded:
        now += STEP_NS
        for chunk in chunks:
            fleet.on_chunk(copy.copy(chunk), now)  # a copy: the engine may keep or change what it is given
        fleet.tick(now)
    return fleet


def stages(data: list[list[bytes]]) -> dict[str, Callable[[], None]]:
    decoded_batches = decoded(data)
    loaded = over_the_wire(decoded_batches)

    def ceiling() -> None:
        for raws in data:
            for raw in raws:
                orjson.loads(raw)

    def dec() -> None:
        for raws in data:
            decode_batch(raws, 1 << 20)

    def dec_events() -> None:
        for raws in data:
            decode_batch(raws, 1 << 20, columnar=False)

    def wire_codec() -> None:
        for chunks in decoded_batches:
            for chunk in chunks:
                for raw in codec.dumps_split(chunk):
                    codec.loads(raw)

    def engine() -> None:
        play(loaded)

    return {"ceiling": ceiling, "decode": dec, "decode_per_event": dec_events, "codec": wire_codec, "engine": engine}


def measure(data: list[list[bytes]], rounds: int) -> dict[str, list[float]]:
    return interleave(stages(data), _events(data), rounds)


def interleave(runs: Mapping[str, Callable[[], object]], events: int, rounds: int,
               warm_up: bool = True) -> dict[str, list[float]]:
    """CPU-µs per event of each run, `rounds` times, the runs interleaved (after one warm-up each unless the
    caller warmed them up)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values() if warm_up else ():
        fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            gc.collect()
            t = time.process_time()
            fn()
            times[name].append((time.process_time() - t) / events * 1e6)
    return times


def _events(data: list[list[bytes]]) -> int:
    n = 0
    for raws in data:
        for raw in raws:
            doc = orjson.loads(raw)
            n += len(doc) if type(doc) is list else 1
    return n


def profile(fn: Callable[[], None], top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.detect_split")
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    gc.set_threshold(50_000, 20, 100)  # as the workers run (streams.gc_tuning)
    gc.freeze()
    data = batches(args.ranks, args.steps)
    times = measure(data, args.rounds)
    print(f"{args.ranks} ranks x {args.steps} steps, {_events(data)} events, {args.rounds} rounds: CPU-µs/event")
    for name, v in times.items():
        print(f"  {name:10s} median {statistics.median(v):7.3f}  min {min(v):7.3f}  all {[round(x, 2) for x in v]}")
    if args.profile:
        for name, fn in stages(data).items():
            if name != "ceiling":
                print(f"==== {name}\n{profile(fn, args.top)}")


if __name__ == "__main__":
    main()
