"""R4 across ranks (streams/detect/signals/kernels.py): ranks are compared on all their compute kernels at once."""

from __future__ import annotations

import numpy as np

from streams.detect.config import DetectionConfig
from streams.detect.signals.kernels import KernelParams, kernel_findings
from streams.detect.signals.shared import SignalState
from streams.detect.windows.step_frames import Frame, ReportedLayout
from tests.streams.helpers import hosts_topology, kernel_rows

WORLD, KERNELS, FLOPS, NS = 32, 24, 4_000_000_000, 1_000_000


def _topo() -> ReportedLayout:
    return hosts_topology(WORLD, 8)


def _summaries(step: int, rng: np.random.Generator, jitter: float, slow: dict[int, float]) -> list[list[object]]:
    out: list[list[object]] = []
    for rank in range(WORLD):
        time_mul = rng.lognormal(0.0, jitter, KERNELS) / slow.get(rank, 1.0)
        rows = [[f"K{k}:4096x4096", "compute", 8, int(NS * (1 + k % 5) * time_mul[k]), FLOPS * (1 + k % 5), 0,
                 None, None, None, None] for k in range(KERNELS)]
        out.append([rank, step, rows, 0])
    return out


def _frame_of(step: int, summaries: list[list[object]]) -> Frame:
    frame = Frame.empty(step, WORLD, 0)
    frame.seen[:] = True
    frame.kernels.append(kernel_rows(summaries))
    return frame


def _frame(step: int, rng: np.random.Generator, jitter: float, slow: dict[int, float]) -> Frame:
    return _frame_of(step, _summaries(step, rng, jitter, slow))


def _rank_r4(steps: int, jitter: float, slow: dict[int, float], seed: int) -> set[str]:
    rng, state, cfg, topo = np.random.default_rng(seed), SignalState(), DetectionConfig(), _topo()
    keys: set[str] = set()
    for step in range(steps):
        for f in kernel_findings(_frame(step, rng, jitter, slow), topo, state, cfg.params(KernelParams), {}):
            if f.rule == "R4" and f.key != "job":
                keys.add(f.key)
    return keys


def test_per_kernel_jitter_alone_flags_no_rank() -> None:
    # 8 % jitter on each of 24 kernels of 32 ranks over 200 steps: 150k kernel ratios, many past any
    # one kernel's fences; a rank's FLOP-weighted mix of them is not
    assert _rank_r4(200, 0.08, {}, seed=3) == set()


def test_a_chip_slow_on_all_its_kernels_is_flagged_alone() -> None:
    assert _rank_r4(20, 0.08, {5: 0.8}, seed=4) == {"rank:5"}


def _job_r4(steps: int, jitter: float, step_jitter: float, slow_from: int, factor: float, seed: int,
            calls_from: int | None = None) -> list[tuple[int, str | None]]:
    """Job-scope R4 findings (step, metric) with every rank `factor` slower from `slow_from` on; from
    `calls_from` on every kernel is launched twice (the same per-call speed)."""
    rng, state, cfg, topo = np.random.default_rng(seed), SignalState(), DetectionConfig(), _topo()
    found = []
    for step in range(steps):
        summaries = _summaries(step, rng, jitter, {r: (1 / factor if step >= slow_from else 1.0) for r in range(WORLD)})
        g = rng.lognormal(0.0, step_jitter)  # the job-wide per-step jitter every kernel shares
        n = 2 if calls_from is not None and step >= calls_from else 1
        for _rank, _step, rows, _other in summaries:
            for r in rows:  # type: ignore[attr-defined]
                r[2], r[3], r[4] = int(r[2]) * n, int(int(r[3]) * g * n), float(r[4]) * n
        frame = _frame_of(step, summaries)
        found += [(step, f.metric) for f in kernel_findings(frame, topo, state, cfg.params(KernelParams), {})
                  if f.rule == "R4" and f.key == "job"]
    return found


def test_job_compute_series_sees_a_few_percent_slowdown_of_every_rank() -> None:
    # 8 % slower on every rank (spec §4 kernel compile defect): under each kernel's 10 % trend bound, about
    # 5 sigma of the job-wide step jitter on the FLOP-weighted series
    found = _job_r4(80, 0.08, 0.015, slow_from=50, factor=1.08, seed=5)
    assert found and all(step >= 50 for step, _ in found)
    compute = {step for step, metric in found if metric == "compute"}
    assert len(compute & set(range(50, 60))) >= 5, "most of the first slowed steps (then the shift enters its IQR)"
    assert _job_r4(200, 0.08, 0.015, slow_from=10**6, factor=1.0, seed=6) == [], "healthy, 8 % jitter: quiet"


def test_repeated_calls_halve_p_on_every_kernel() -> None:
    found = _job_r4(40, 0.03, 0.015, slow_from=10**6, factor=1.0, seed=7, calls_from=30)
    steps = {step for step, _ in found}
    assert min(steps) == 30 and {f"K{k}:4096x4096" for k in range(KERNELS)} <= {m for _, m in found}
