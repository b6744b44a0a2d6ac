"""Child process for `make bench-parse`: HolisticTraceAnalysis 0.5.0 parse + temporal breakdown
(+ stragglers) of one trace directory; prints one JSON line with seconds and peak RSS."""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings


def own_peak_rss_mb() -> float:
    """VmHWM (reset by execve; ru_maxrss keeps the parent's peak). Runs in HTA's interpreter, so not
    imported from streams.profiles.measure."""
    with open("/proc/self/status") as status:
        lines = status.read().splitlines()
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("/proc/self/status has no VmHWM")


def main(trace_dir: str) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    start = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    imported = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    table = analysis.get_temporal_breakdown(visualize=False)
    seconds = time.perf_counter() - imported
    stragglers: list[int] | None
    try:
        stragglers = [int(r) for r in analysis.get_potential_stragglers(num_candidates=1)]
    except Exception:  # HTA raises on single-rank traces and on traces without ncclKernel_* names
        stragglers = None
    breakdown = {
        str(int(row["rank"])): {"idle_us": float(row["idle_time(us)"]), "compute_us": float(row["compute_time(us)"]),
                                "non_compute_us": float(row["non_compute_time(us)"]),
                                "span_us": float(row["kernel_time(us)"])}
        for row in table.to_dict("records")
    }
    print(json.dumps({"seconds": seconds, "import_seconds": imported - start, "breakdown": breakdown,
                      "stragglers": stragglers,
                      "peak_rss_mb": own_peak_rss_mb()}))


if __name__ == "__main__":
    main(sys.argv[1])
