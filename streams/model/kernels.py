"""The fleet's kernel benchmark (R4's `P_bench`): FLOP/s per kernel key across healthy jobs.

Each job contributes one figure per (kernel key, device kind): the median of its FLOP/s over
its healthy steps, so a long job weighs as much as a short one and one slow step moves
nothing. Across jobs the benchmark keeps p10 / p50 / p90: a job below the fleet's p10 is
unusual, one at p50 is typical.

A key carries its shape ("F2:4096x6144x4096"), and a job with another layout runs other
shapes. `bench_for` falls back from the exact shape to the kernel class (the part before
":", fitted over every shape of the class), then to the vendor peak prior: a class's
efficiency moves far less across shapes than the peak overstates it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from streams.model.reference import KernelBench, ReferenceModels


@dataclass(frozen=True, slots=True)
class KernelFlops:
    """One job's FLOP/s for one kernel key on one device kind (one step, or already its median)."""

    job: str
    key: str
    device_kind: str
    flops_per_s: float


def kernel_class(key: str) -> str:
    """The shape-free class of a kernel key: "F2:4096x6144x4096" -> "F2"."""
    return key.split(":", 1)[0]


def fit_kernel_bench(rows: Iterable[KernelFlops], *, with_classes: bool = True) -> tuple[KernelBench, ...]:
    """Per (key, device kind): p10 / p50 / p90 across jobs of each job's median FLOP/s.

    Rows may be per step (the median is taken here) or per job. Non-finite or non-positive
    figures are dropped. `with_classes`: also one bench per kernel class (the key without its
    shape) over every shape, each job's median over its shapes' medians, for `bench_for`.
    """
    per_job: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        if np.isfinite(r.flops_per_s) and r.flops_per_s > 0:
            per_job.setdefault((r.key, r.device_kind, r.job), []).append(float(r.flops_per_s))
    medians = {k: float(np.median(v)) for k, v in per_job.items()}
    groups: dict[tuple[str, str], list[float]] = {}
    for (key, kind, _job), med in medians.items():
        groups.setdefault((key, kind), []).append(med)
    if with_classes:
        by_class: dict[tuple[str, str, str], list[float]] = {}
        for (key, kind, job), med in medians.items():
            if kernel_class(key) != key:
                by_class.setdefault((kernel_class(key), kind, job), []).append(med)
        raw = set(groups)  # a key without a shape is its own class: its rows stand as they are
        for (cls, kind, _job), meds in by_class.items():
            if (cls, kind) not in raw:
                groups.setdefault((cls, kind), []).append(float(np.median(meds)))
    out: list[KernelBench] = []
    for (key, kind), figures in sorted(groups.items()):
        p10, p50, p90 = np.percentile(np.asarray(figures), [10.0, 50.0, 90.0])
        out.append(KernelBench(key=key, device_kind=kind, p10=float(p10), p50=float(p50), p90=float(p90),
                               jobs=len(figures)))
    return tuple(out)


def bench_for(models: ReferenceModels, key: str, device_kind: str) -> KernelBench | None:
    """The benchmark of `key`: its own shape, else its class over every shape, else the vendor prior."""
    exact = models._kernel_index.get((key, device_kind))
    if exact is not None:
        return exact
    cls = models._kernel_index.get((kernel_class(key), device_kind))
    if cls is not None:
        return cls
    return models.kernel_bench(key, device_kind)
