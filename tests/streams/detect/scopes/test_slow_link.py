"""Slow link (streams/detect/scopes/slow_link.py) on hand-built kernel summaries: 4 hosts x 2 ranks,
2 PP stages (ranks 0-3, 4-7), DP groups across hosts {0,2} {1,3} {4,6} {5,7}, PP pairs (r, r+4)."""

from __future__ import annotations

import numpy as np

from schemas.columns import DOMAINS
from streams.detect.config import DetectionConfig
from streams.detect.scopes.slow_link import LinkState, Params, evaluate
from streams.detect.windows.step_frames import Frame, ReportedLayout
from tests.streams.helpers import kernel_rows

WORLD = 8


def _topo() -> ReportedLayout:
    topo = ReportedLayout()
    topo.grow(WORLD)
    topo.hosts = [f"node-{h}" for h in range(4)]
    topo.host_index = {h: i for i, h in enumerate(topo.hosts)}
    topo.host_of = np.arange(WORLD, dtype=np.int64) // 2
    topo.groups[DOMAINS.index("dp")] = (np.arange(WORLD) // 4) * 2 + np.arange(WORLD) % 2
    topo.groups[DOMAINS.index("pp")] = np.arange(WORLD) % 4
    return topo


def _frame(step: int, slow_host: int | None, factor: float = 2.0, seed: int = 0) -> Frame:
    rng = np.random.default_rng(seed * 1000 + step)
    frame = Frame.empty(step, WORLD, 0)
    frame.seen[:] = True
    topo = _topo()
    summaries = []
    for rank in range(WORLD):
        entries = []
        for key, domain, ms in (("allreduce/dp", "dp", 30.0), ("send/pp", "pp", 1.5)):
            g = int(topo.groups[DOMAINS.index(domain), rank])
            members = np.flatnonzero(topo.groups[DOMAINS.index(domain)] == g)
            slowed = slow_host is not None and bool((topo.host_of[members] == slow_host).any())
            per_call = ms * (factor if slowed else 1.0) * rng.lognormal(0, 0.03)
            longest = int(per_call * 1.1e6)
            entries.append([key, "comm", 4, longest * 4 + 5_000_000, None, 1 << 26, domain, None, None, None,
                            longest])
        summaries.append([rank, step, entries, 0])
    frame.kernels.append(kernel_rows(summaries))
    return frame


def _run(faulty: int | None, steps: range, factor: float = 2.0) -> list[list[str]]:
    params, state, out = DetectionConfig().params(Params), LinkState(), []
    for step in steps:
        fault = faulty if step >= 20 else None
        state, found = evaluate(_frame(step, fault, factor), _topo(), state, params)
        out.append([f.link or "" for f in found])
    return out


def test_degraded_link_names_its_host_only() -> None:
    out = _run(2, range(30))
    assert all(not f for f in out[:20]), "healthy steps"
    assert all(f == ["node-2/rdma"] for f in out[20:]), out[20:]


def test_healthy_jitter_and_mild_slowdown_raise_nothing() -> None:
    assert all(not f for f in _run(None, range(60)))
    assert all(not f for f in _run(1, range(40), factor=1.2))


def test_no_kernels_no_findings() -> None:
    frame = Frame.empty(3, WORLD, 0)
    assert evaluate(frame, _topo(), LinkState(), DetectionConfig().params(Params))[1] == []
