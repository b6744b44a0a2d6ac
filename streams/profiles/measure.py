"""`python -m streams.profiles.measure PATH...`: parse + temporal breakdown in this process and print
one JSON line with seconds, bytes and peak RSS. Run as a child so the peak RSS is this work's alone."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import orjson

from streams.profiles.analysis.breakdown import hta_breakdown, step_breakdowns
from streams.profiles.loader import load_all
from streams.profiles.model import Profile


def measure(paths: list[Path]) -> dict[str, object]:
    start = time.perf_counter()
    profiles, _ = load_all(paths)
    per_rank: dict[str, dict[str, float]] = {}
    for p in profiles:
        step_breakdowns(p)
        b = hta_breakdown(p, hta_rounding=True)
        per_rank[str(p.rank)] = {"idle_us": b.idle, "compute_us": b.compute, "non_compute_us": b.non_compute,
                                 "span_us": b.span}
    seconds = time.perf_counter() - start
    size = sum(_size(p) for p in profiles)
    return {"seconds": seconds, "bytes": size, "events": sum(p.events for p in profiles),
            "kernels": sum(len(p.kernels) for p in profiles), "breakdown": per_rank,
            "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak plus, for the parser pool, (pool size × the largest child's peak): an upper
    bound of the memory the parse held at once.

    The own peak is VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a child started by a
    large process (pytest at the end of a full run holds gigabytes) would report its parent's peak."""
    own = own_peak_rss_mb()
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return own + (min(4, os.cpu_count() or 1) * child if child > 0 else 0.0)


def own_peak_rss_mb() -> float:
    """This process image's peak resident set (VmHWM: reset by execve, unlike ru_maxrss)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("/proc/self/status has no VmHWM: peak RSS cannot be measured here")


def _size(p: Profile) -> int:
    return p.bytes_read


if __name__ == "__main__":
    sys.stdout.write(orjson.dumps(measure([Path(a) for a in sys.argv[1:]])).decode() + "\n")
