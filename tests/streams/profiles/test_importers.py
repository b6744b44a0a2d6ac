"""Every importer on the real samples (read in place), checked against an independent json/csv read."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from streams.profiles.analysis.host import launch_latency_us
from streams.profiles.importers.ascend_pt import parse_ascend
from streams.profiles.importers.kineto import nccl_op, parse_kineto
from streams.profiles.importers.msprof_cluster import parse_cluster
from streams.profiles.loader import discover, load_all
from streams.profiles.model import COMMUNICATION, COMPUTE, kernel_kind
from tests.streams.profiles.conftest import ASCEND, FIXTURES, KINETO

KINETO_FILES = ["trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz",
                "nccl_parser_config_nccl_data.json.gz"]


def _events(path: Path) -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    with gzip.open(path) as fh:
        data = json.load(fh)
    return data, data["traceEvents"]


@pytest.mark.parametrize("name", KINETO_FILES)
def test_kineto_counts_match_a_plain_json_read(real_samples: Path, name: str) -> None:
    path = KINETO / name
    data, events = _events(path)
    profile = parse_kineto(path)
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    runtime = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    steps = sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert len(profile.kernels) == len(device)
    assert len(profile.runtime) == len(runtime)
    assert [s.number for s in profile.steps] == steps
    assert profile.rank == data["distributedInfo"]["rank"]
    assert profile.world == data["distributedInfo"]["world_size"]
    nccl = [e for e in device if e["name"].startswith("nccl")]
    assert len(profile.collectives) == len(nccl) > 0
    assert int(np.sum(profile.kernels.kind == COMMUNICATION)) == len(nccl)


def test_kineto_2024_layout_collective_args_and_groups(real_samples: Path) -> None:
    path = KINETO / "nccl_parser_config_nccl_data.json.gz"
    data, events = _events(path)
    profile = parse_kineto(path)
    assert profile.groups == {pg["pg_name"]: pg["ranks"] for pg in data["distributedInfo"]["pg_config"]}
    assert profile.device is not None and "A100" in profile.device
    first = next(e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
    coll = profile.collectives[0]
    assert coll.op == first["args"]["Collective name"]
    assert coll.bytes == first["args"]["In msg nelems"] * 4  # dtype Float
    assert coll.group == first["args"]["Process Group Name"]
    assert coll.ts == first["ts"]
    # baseTimeNanoseconds comes after the event array in this layout: read from the tail
    assert profile.meta["base_us"] == data["baseTimeNanoseconds"] / 1000.0


def test_launch_latency_pairs_runtime_and_kernel_by_correlation(real_samples: Path) -> None:
    path = KINETO / "nccl_parser_config_nccl_data.json.gz"
    _, events = _events(path)
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    expected = sorted(e["ts"] - launches[e["args"]["correlation"]] for e in events
                      if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                      and e.get("args", {}).get("correlation") in launches)
    got = np.sort(launch_latency_us(parse_kineto(path)))
    assert got.size == len(expected) > 1000
    assert np.allclose(got, expected, atol=1e-3)
    assert float(np.min(got)) >= 0.0


def test_old_and_new_nccl_kernel_names_are_collectives() -> None:
    for name in ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                 "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                 "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"):
        assert kernel_kind(name) == COMMUNICATION, name
    assert nccl_op("ncclDevKernel_AllGather_RING_LL(x)") == "allgather"
    assert nccl_op("ncclKernel_AllReduce_RING_LL_Sum_float(x)") == "allreduce"
    assert kernel_kind("void cutlass::Kernel<x>(y)") == COMPUTE


@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_torch_npu_output(real_samples: Path, rank: int) -> None:
    root = ASCEND / f"rank{rank}_ascend_pt"
    out = root / "ASCEND_PROFILER_OUTPUT"
    profile = parse_ascend(root)
    assert profile.rank == json.loads((root / f"profiler_info_{rank}.json").read_text())["rank_id"]
    with (out / "kernel_details.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    compute = [r for r in rows if r["Accelerator Core"] != "HCCL"]
    assert int(np.sum(profile.kernels.kind == COMPUTE)) == len(compute)
    # the trailing tab of 'Start Time(us)' is gone and the value kept exact
    assert float(np.min(profile.kernels.ts[profile.kernels.kind == COMPUTE])) == pytest.approx(
        min(float(r["Start Time(us)"].strip()) for r in compute))
    trace = json.loads((out / "trace_view.json").read_text())
    steps = [e for e in trace if e.get("name", "").startswith("ProfilerStep#")]
    assert [s.number for s in profile.steps] == [int(e["name"].split("#")[1]) for e in steps]
    assert profile.steps[0].ts == pytest.approx(float(steps[0]["ts"]))  # ts is a string in trace_view.json
    comm = json.loads((out / "communication.json").read_text())
    n_ops = sum(1 for v in comm.values() for kind in ("collective", "p2p") for op in v[kind]
                if not op.startswith("Total"))  # "Total Op Info" sums the others
    assert len(profile.collectives) == n_ops
    assert [r.step for r in profile.reference] == [50]


def test_ascend_tolerates_unknown_columns(real_samples: Path, tmp_path: Path) -> None:
    """Level 2 adds fields: an extra column anywhere must not change what is read."""
    src = ASCEND / "rank0_ascend_pt"
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    path = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        for i, row in enumerate(rows):
            writer.writerow(["Level2 Field" if i == 0 else "7", *row, "Another" if i == 0 else "y"])
    base = parse_ascend(src)
    wide = parse_ascend(dst)
    assert np.array_equal(base.kernels.ts, wide.kernels.ts)
    assert np.array_equal(base.kernels.dur, wide.kernels.dur)


def test_msprof_cluster_outputs() -> None:
    table = parse_cluster(FIXTURES / "msprof_cluster")
    assert [r["Index"] for r in table.steps if r["Type"] == "rank"] == [0, 1, 2]
    assert table.steps[0]["Computing"] == 9000.0
    ranks = sorted({r["rank"] for r in table.collectives})
    assert ranks == [0, 1, 2]
    assert {r["op"] for r in table.collectives} >= {"hcom_allReduce__1_0_1@123"}
    assert table.groups[0] == {"kind": "collective", "ranks": [0, 1, 2]}


def test_discover_mixed_formats(real_samples: Path) -> None:
    found = list(discover(real_samples))
    kinds = sorted(fmt for fmt, _ in found)
    assert kinds == ["ascend_pt", "ascend_pt", "kineto", "kineto", "kineto"]
    profiles, clusters = load_all([real_samples, FIXTURES / "msprof_cluster"])
    assert len(profiles) == 5 and len(clusters) == 1
