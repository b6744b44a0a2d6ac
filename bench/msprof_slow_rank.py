"""Child process for `make bench-replay`, run by msprof-analyze's own venv: its advisor's slow-rank analysis
(`SlowRankAnalyzer`, `msprof-analyze advisor`'s "slow rank" section) of one folder holding a
`cluster_analysis_output/` (made by `msprof-analyze cluster`, or shipped as such). Prints one JSON line:
the bottleneck text, the per step-rank (compute, communication, free) table it judged, and per dimension
its max-min gap over the mean step (`compute_max_gap_ratio`, what `process()` compares with its 5 %
threshold), whether that flags it, and the step-rank keys holding the largest and the smallest value.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


def main(folder: str) -> None:
    logging.disable(logging.WARNING)
    from msprof_analyze.advisor.analyzer.cluster.slow_rank_analyzer import SlowRankAnalyzer  # type: ignore
    from msprof_analyze.prof_common.additional_args_manager import AdditionalArgsManager  # type: ignore

    AdditionalArgsManager().init({"language": "en"})
    analyzer: Any = SlowRankAnalyzer(folder, output_path=folder)
    analyzer.process()
    table: dict[str, list[float]] = dict(analyzer.step_trace_dict or {})
    totals = [sum(v) for v in table.values()]
    mean_total = sum(totals) / len(totals) if totals else 0.0
    dims: dict[str, Any] = {}
    for i, name in enumerate(("compute", "communication", "free")):  # analyzer.BOTTLENECK_LIST's order
        values = {key: v[i] for key, v in table.items()}
        ratio = analyzer.compute_max_gap_ratio(list(values.values()), mean_total) if values else 0.0
        dims[name] = {"gap_ratio": ratio, "flagged": ratio > analyzer.RATIO_THRESHOLD,
                      "max": max(values, key=values.__getitem__) if values else None,
                      "min": min(values, key=values.__getitem__) if values else None}
    print(json.dumps({"bottleneck": analyzer.bottelneck, "table": table,
                      "stages": analyzer.stages, "dimensions": dims}, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
