"""Pipeline stages read from the dumps, so ranks are compared only within their stage (ranks.py, waits.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.profiles.analysis.ranks import cluster_verdict
from streams.profiles.importers.ascend_pt import parse_ascend
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.model import pipeline_stage
from tests.streams.profiles.conftest import ASCEND, KINETO


def _kineto_rank(tmp_path: Path, rank: int, starts: list[float], durs: list[float]) -> Path:
    """Rank `rank` of 4: stages {0, 1} x DP {0, 1}; Megatron's group descriptions in pg_config. The all-reduces
    carry no process-group arg (older kernels): matched only by op and order."""
    stage, dp = rank // 2, rank % 2
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
           {"pg_name": str(1 + dp), "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": [dp, dp + 2]},
           {"pg_name": str(3 + stage), "pg_desc": "DATA_PARALLEL_GROUP", "ranks": [2 * stage, 2 * stage + 1]}]
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
                                     "tid": 1, "ts": 0.0, "dur": 2000.0}]
    for i, (s, d) in enumerate(zip(starts, durs, strict=True)):
        events.append({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0,
                       "tid": 7, "ts": s, "dur": d, "args": {"stream": 7, "correlation": i + 1}})
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4,
                                                    "pg_config": pgs}, "traceEvents": events}))
    return path


def test_kineto_stage_from_the_pipeline_group_and_verdict_within_it(tmp_path: Path) -> None:
    # stage 1 (ranks 2, 3) starts its all-reduces 400 µs later by design; in stage 0 rank 1 is late
    runs = {0: ([100.0, 300.0], [50.0, 60.0]), 1: ([130.0, 330.0], [20.0, 30.0]),
            2: ([500.0, 700.0], [10.0, 10.0]), 3: ([500.0, 700.0], [10.0, 10.0])}
    profiles = [parse_kineto(_kineto_rank(tmp_path, r, *runs[r])) for r in range(4)]
    assert [p.stage for p in profiles] == [0, 0, 1, 1]
    assert [f.rank for f in cluster_verdict(profiles)] == [1]  # pooled (no stages), stage 1 looked late


def test_ascend_stage_from_parallel_group_info(real_samples: Path, tmp_path: Path) -> None:
    root = tmp_path / "rank1_ascend_pt"
    root.mkdir()
    for child in (ASCEND / "rank1_ascend_pt").iterdir():
        if child.name != "profiler_metadata.json":
            (root / child.name).symlink_to(child)
    info = {"10.0.0.1%enp_60000_0_1": {"group_name": "pp", "group_rank": 1, "global_ranks": [0, 1]},
            "10.0.0.1%enp_60000_0_2": {"group_name": "dp", "group_rank": 0, "global_ranks": [1, 3, 5, 7]}}
    (root / "profiler_metadata.json").write_text(json.dumps({"ENV_VARIABLES": {}, "parallel_group_info": info}))
    assert parse_ascend(root).stage == 1
    assert parse_ascend(ASCEND / "rank1_ascend_pt").stage is None  # the real sample records no groups


def test_no_pipeline_group_no_stage(real_samples: Path) -> None:
    assert parse_kineto(KINETO / "nccl_parser_config_nccl_data.json.gz").stage is None  # default_pg only
    assert pipeline_stage(3, [("DATA_PARALLEL_GROUP", [2, 3]), ("EMBEDDING_GROUP", [0, 3])]) is None
    assert pipeline_stage(3, [("ppx", [2, 3]), ("pp", [1, 3])]) == 1


def test_a_late_arrival_too_small_to_matter_names_nobody(tmp_path: Path) -> None:
    """Someone always starts a collective last: 1 µs late on a 2 ms step (0.05 %, as the 0.08 ms on
    148 ms of a real torch_npu level-2 pair, where msprof-analyze sees no slow rank) is no straggler;
    30 µs (1.5 %) is."""
    def verdict(late_us: float) -> list[int | None]:
        runs = {0: ([100.0, 300.0], [50.0, 60.0]), 1: ([100.0 + late_us, 300.0 + late_us], [20.0, 30.0])}
        profiles = [parse_kineto(_kineto_rank(tmp_path, r, *runs[r])) for r in (0, 1)]
        return [f.rank for f in cluster_verdict(profiles)]

    assert verdict(1.0) == []
    assert verdict(30.0) == [1]
