"""Dumps without a collective list (torch_npu level 0 writes no communication.json): the communication kernels
themselves are matched across ranks (streams/profiles/analysis/ranks.py `kernel_collectives`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streams.profiles.analysis.ranks import cluster_verdict, kernel_collectives
from streams.profiles.loader import load_all
from streams.profiles.model import COMMUNICATION, COMPUTE, Kernels, Names, Profile, Step

REAL = Path(__file__).resolve().parents[3] / "bench" / "data" / "real"


def _rank(rank: int, offset_us: float, names: list[str], durs: list[float], stream: int = 7) -> Profile:
    """One step of 1,000 µs from `offset_us`; a compute kernel, then one communication kernel per name, each
    ending when the slowest rank's does (synchronous: the late rank's kernel is the shortest)."""
    table = Names()
    ends = [400.0, 700.0, 900.0][: len(names)]
    ts = [offset_us] + [e - d for e, d in zip(ends, durs, strict=True)]
    dur = [300.0, *durs]
    kind = [COMPUTE] + [COMMUNICATION] * len(names)
    k = Kernels(np.asarray(ts), np.asarray(dur), np.asarray(kind, np.int8), np.full(len(ts), stream, np.int32),
                np.asarray([table.id(n) for n in ["gemm", *names]], np.int32), np.full(len(ts), -1, np.int64))
    return Profile(source=f"r{rank}", format="ascend_pt", rank=rank, names=table, kernels=k,
                   steps=[Step(50, offset_us, 1000.0 - offset_us)])


HCCL = ["hcom_allReduce__868_0_1", "hcom_allReduce__868_1_1", "hcom_allGather__868_2_1"]


def test_the_late_rank_is_read_from_the_communication_kernels() -> None:
    # rank 1 starts its step 60 µs late: it arrives last at every collective and its kernels are the shortest
    ranks = [_rank(0, 0.0, HCCL, [150.0, 100.0, 80.0]), _rank(1, 60.0, HCCL, [90.0, 95.0, 75.0])]
    verdict = cluster_verdict(ranks)
    assert [(f.rank, f.evidence["collectives"]) for f in verdict] == [(1, 3.0)]


def test_kernel_names_give_op_and_group() -> None:
    p = _rank(0, 0.0, ["hcom_allReduce__868_0_1", "ncclDevKernel_AllGather_RING_LL", "Notify_Wait"],
              [10.0, 10.0, 10.0])
    assert [(c.op, c.group) for c in kernel_collectives(p)] == [("allreduce", "hcom:868"),
                                                               ("allgather", "stream:7")]


def test_a_dump_with_a_collective_list_keeps_it() -> None:
    ranks = [_rank(0, 0.0, HCCL, [150.0, 100.0, 80.0]), _rank(1, 60.0, HCCL, [90.0, 95.0, 75.0])]
    ranks[1].collectives = [c for c in kernel_collectives(ranks[0])]  # rank 1 "lists" rank 0's timings
    assert cluster_verdict(ranks) == []  # identical lists: nobody arrives last


def test_torch_npu_level0_pair_names_the_rank_msprof_analyze_names() -> None:
    # msprof-analyze's advisor: Communication differs by 16.9 ms (16 % of the step), least on rank 1
    profiles, _ = load_all([REAL / "msinsight-torch_npu-level0"])
    assert [f.rank for f in cluster_verdict(profiles)] == [1]
