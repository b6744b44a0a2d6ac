"""Synthetic traces with ground truth: new NCCL kernel names and an injected late rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streams.profiles.analysis.breakdown import step_breakdowns
from streams.profiles.analysis.ranks import cluster_verdict, late_start_straggler
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.model import COMMUNICATION
from streams.profiles.synthetic import write_trace


def test_ncclDevKernel_names_are_collectives(tmp_path: Path) -> None:
    path = tmp_path / "new.json.gz"
    write_trace(path, 200_000, layers=64, new_names=True)
    p = parse_kineto(path)
    assert p.collectives and all(c.name.startswith("ncclDevKernel_") for c in p.collectives)
    assert all(c.op == "allreduce" and c.bytes == (1 << 20) * 4 for c in p.collectives)
    assert int(np.sum(p.kernels.kind == COMMUNICATION)) == len(p.collectives)
    assert all(b.communication > 0 for b in step_breakdowns(p))


def test_injected_late_rank_is_found(tmp_path: Path) -> None:
    late = 2
    profiles = []
    for rank in range(4):
        path = tmp_path / f"rank-{rank}.json"
        write_trace(path, 300_000, rank=rank, world=4, layers=64, delay_us=80.0 if rank == late else 0.0,
                    new_names=True)
        profiles.append(parse_kineto(path))
    assert late_start_straggler(profiles) == late
    verdict = cluster_verdict(profiles)
    assert verdict and verdict[0].rank == late



def test_late_rank_found_with_old_and_new_kernel_names(tmp_path: Path) -> None:
    """HTA 0.5.0 only looks at ncclKernel_* (HTA #360); steplens finds the late rank under both names."""
    late = 1
    for new in (False, True):
        d = tmp_path / ("new" if new else "old")
        d.mkdir()
        profiles = []
        for rank in range(3):
            path = d / f"rank-{rank}.json"
            write_trace(path, 300_000, rank=rank, world=3, layers=64, delay_us=60.0 if rank == late else 0.0,
                        new_names=new)
            profiles.append(parse_kineto(path))
        assert late_start_straggler(profiles) == late, new
