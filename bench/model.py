"""`make bench-model`: how well steplens' expected-time and memory models predict what real jobs do.

Writes bench/results/model.json (keys in ../shared/bench/RESULTS.md): the expected step time
against the observed one on every real multi-rank trace and on simulated healthy jobs, each
predicted by reference models that never saw it (bench/model_time.py); the collective curve's
held-out error per link class; the expected peak memory against measured peaks of real runs of
producers/workloads, and seed 004's worked 7B figures (bench/model_memory.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.model_memory import memory_section
from bench.model_time import time_section
from bench.provenance import git_commit, machine

OUT = Path(__file__).resolve().parent / "results" / "model.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    result: dict[str, Any] = {"machine": machine(), "started": started, "git": git_commit()}
    result.update(time_section())
    result.update(memory_section())
    result["duration_s"] = round(time.monotonic() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"{args.out}: step_time_error_geomean {result['step_time_error_geomean']:.4f}, "
          f"memory_error {result['memory_error']:.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
