"""Expected vs observed, per component, of one job's typical step: what `steplens perf` and the report show.

`predict_summary_step` composes the expected step (overlap, the slowest rank, the exposed tail);
this module only reads its answer apart into what a person acts on: compute against the fleet's
FLOP/s for the kernel on the device kind, each collective kind against its link class's curve at
its message size ("DP all-reduce 400 MB on inter-host RDMA 3.1x its expected time"), the exposed
communication, host/data (not modelled: taken as observed). One composition, not a second one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streams.model.reference import ReferenceModels
from streams.model.step_time import SummaryStep, _observed_expected, predict_summary_step

OP_NAMES = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
            "alltoall": "all-to-all", "broadcast": "broadcast", "send": "send", "recv": "recv"}
LINK_NAMES = {"intra": "intra-host HCCS/NVLink", "inter": "inter-host RDMA", "tcp": "TCP"}
# a component slower than this times its expectation is named as the cause of a slow step
SLOW_RATIO = 1.5


@dataclass(frozen=True, slots=True)
class Part:
    """One component of the step, ms per step (the typical rank's), observed against expected."""

    component: str     # "step", "compute", "comm:allreduce/dp", "exposed comm", "host/data"
    text: str          # for a person: "DP all-reduce 400 MB on inter-host RDMA (16 ranks), 4 calls"
    observed_ms: float
    expected_ms: float
    modelled: bool     # False: no reference model knew it (expected = observed)

    @property
    def ratio(self) -> float:
        return self.observed_ms / self.expected_ms if self.expected_ms > 0 else math.nan


@dataclass(frozen=True, slots=True)
class Expectation:
    """A job's typical step against what the fleet's reference models expect of it."""

    version: int
    parts: tuple[Part, ...]  # "step" first
    modelled_share: float    # share of the observed kernel time a reference model predicted

    @property
    def step(self) -> Part:
        return self.parts[0]

    @property
    def worst(self) -> Part | None:
        """The modelled kernel component furthest above its expectation (compute or a collective)."""
        kernels = [p for p in self.parts if p.modelled and p.component.startswith(("compute", "comm:"))
                   and math.isfinite(p.ratio)]
        return max(kernels, key=lambda p: (p.ratio, p.observed_ms), default=None)

    def summary(self) -> str:
        """"step 1480 ms, expected 710 ms; DP all-reduce 400 MB on inter-host RDMA 3.1x its expected time"."""
        s = self.step
        head = f"step {s.observed_ms:.1f} ms, expected {s.expected_ms:.1f} ms"
        w = self.worst
        if w is not None and w.ratio >= SLOW_RATIO:
            head += f"; {w.text} {w.ratio:.1f}x its expected time"
        return head


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.0f} MB" if nbytes >= 1e7 else f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 \
        else f"{nbytes / 1e3:.0f} KB"


def collective_text(key: str, op: str, link: str, group_size: int, bytes_per_call: float, calls: float) -> str:
    """"DP all-reduce 400 MB on inter-host RDMA (16 ranks, 4 calls/step)" from a kernel summary's figures."""
    domain = key.split("/", 1)[1].upper() if "/" in key else ""
    name = OP_NAMES.get(op, op)
    return (f"{domain} {name} {_mb(bytes_per_call)} on {LINK_NAMES.get(link, link)} "
            f"({group_size} ranks, {calls:g} calls/step)").strip()


def expected_vs_observed(s: SummaryStep, models: ReferenceModels, rank_spread: float = 0.0) -> Expectation:
    """Per component of the step `s` (typically a job's median step), observed vs expected, ms per step.

    Kernel components are the mean over the step's ranks of their rows (compute: every compute
    kernel together; one part per collective key, its transfer time with the wait removed); the
    step and exposed communication come from `predict_summary_step`'s composition.
    """
    pred = predict_summary_step(s, models, rank_spread)
    exp, obs, ok = _observed_expected(s, models)
    world = max(int(s.busy_ms.size), 1)
    parts = [Part("step", "step time (the slowest rank's)", pred.observed.step_ms, pred.expected.step_ms, True)]
    comp = np.array([c == "compute" for c in s.cat], dtype=bool)
    if comp.any():
        parts.append(Part("compute", "compute kernels against the fleet's FLOP/s on " + s.device_kind,
                          float(s.total_ns[comp].sum()) / world / 1e6, float(exp[comp].sum()) / world / 1e6,
                          bool(ok[comp].any())))
    keys = sorted({s.key[i] for i in range(len(s.key)) if s.cat[i] == "comm"})
    for key in keys:
        rows = np.array([s.key[i] == key for i in range(len(s.key))], dtype=bool)
        first = int(np.flatnonzero(rows)[0])
        count = float(s.count[rows].sum())
        per_call = float(s.nbytes[rows].sum()) / count if count > 0 else 0.0
        op, link = str(s.op[first] or "?"), str(s.link[first] or "?")
        calls = count / world
        text = collective_text(key, op, link, int(s.group_size[first]), per_call, calls)
        parts.append(Part(f"comm:{key}", text, float(obs[rows].sum()) / world / 1e6,
                          float(exp[rows].sum()) / world / 1e6, bool(ok[rows].all())))
    parts.append(Part("exposed comm", "communication not hidden behind compute (the step's tail)",
                      pred.observed.comm_exposed_ms, pred.expected.comm_exposed_ms, True))
    parts.append(Part("host/data", "data loading, GC, inter-step CPU (not modelled: as observed)",
                      pred.observed.host_idle_ms, pred.expected.host_idle_ms, False))
    return Expectation(models.version, tuple(parts), pred.modelled_share)
