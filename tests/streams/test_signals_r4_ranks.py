"""R4 across ranks (streams/signals.py `_kernels`): ranks are compared on all their compute kernels at once."""

from __future__ import annotations

import numpy as np

from steplens.config import DetectionConfig
from streams.signals import SignalState, _kernels
from streams.windows.step_frames import Frame, Topology
from tests.streams.helpers import hosts_topology

WORLD, KERNELS, FLOPS, NS = 32, 24, 4_000_000_000, 1_000_000


def _topo() -> Topology:
    return hosts_topology(WORLD, 8)


def _frame(step: int, rng: np.random.Generator, jitter: float, slow: dict[int, float]) -> Frame:
    frame = Frame.empty(step, WORLD, 0)
    frame.seen[:] = True
    for rank in range(WORLD):
        time_mul = rng.lognormal(0.0, jitter, KERNELS) / slow.get(rank, 1.0)
        rows = [[f"K{k}:4096x4096", "compute", 8, int(NS * (1 + k % 5) * time_mul[k]), FLOPS * (1 + k % 5), 0,
                 None, None, None, None] for k in range(KERNELS)]
        frame.kernels.append((rank, rows, 0))  # type: ignore[arg-type]
    return frame


def _rank_r4(steps: int, jitter: float, slow: dict[int, float], seed: int) -> set[str]:
    rng, state, cfg, topo = np.random.default_rng(seed), SignalState(), DetectionConfig(), _topo()
    keys: set[str] = set()
    for step in range(steps):
        for f in _kernels(_frame(step, rng, jitter, slow), topo, state, cfg, {}):
            if f.rule == "R4" and f.key != "job":
                keys.add(f.key)
    return keys


def test_per_kernel_jitter_alone_flags_no_rank() -> None:
    # 8 % jitter on each of 24 kernels of 32 ranks over 200 steps: 150k kernel ratios, many past any
    # one kernel's fences; a rank's FLOP-weighted mix of them is not
    assert _rank_r4(200, 0.08, {}, seed=3) == set()


def test_a_chip_slow_on_all_its_kernels_is_flagged_alone() -> None:
    assert _rank_r4(20, 0.08, {5: 0.8}, seed=4) == {"rank:5"}
