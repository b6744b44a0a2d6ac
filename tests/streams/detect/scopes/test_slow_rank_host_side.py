"""A slow rank whose host's other ranks all spend extra time in host-side CPU work is the host's
problem (streams/detect/scopes/slow_rank.py `_host_side_shared`; Hermes' foreign process on node-0)."""

from __future__ import annotations

import numpy as np

from schemas.columns import PHASES
from streams.detect.scopes.slow_rank import _host_side_shared
from streams.detect.windows.step_frames import Frame

WORLD, PER_HOST = 32, 8


def _frame(interstep_host0: float, data_rank: int | None = None) -> Frame:
    f = Frame.empty(50, WORLD, 0)
    f.seen[:] = True
    f.start_ns[:] = 0
    f.end_ns[:] = 1_200_000_000
    rng = np.random.default_rng(0)
    f.phases[:] = 0.0
    f.phases[PHASES.index("forward_ms")] = 400.0 * rng.lognormal(0, 0.03, WORLD)
    f.phases[PHASES.index("backward_ms")] = 700.0 * rng.lognormal(0, 0.03, WORLD)
    f.phases[PHASES.index("data_ms")] = 12.0 * rng.lognormal(0, 0.03, WORLD)
    f.phases[PHASES.index("interstep_cpu_ms")] = 4.0 * rng.lognormal(0, 0.03, WORLD)
    f.phases[PHASES.index("interstep_cpu_ms"), :PER_HOST] += interstep_host0
    if data_rank is not None:
        f.phases[PHASES.index("data_ms"), data_rank] += 300.0
    return f


def test_the_hosts_peers_sharing_inter_step_cpu_make_it_the_hosts() -> None:
    assert _host_side_shared(_frame(60.0), np.arange(PER_HOST), [3]) == "interstep_cpu_ms"


def test_a_rank_slow_on_its_own_stays_the_ranks() -> None:
    assert _host_side_shared(_frame(0.0), np.arange(PER_HOST), [3]) is None
    assert _host_side_shared(_frame(0.0, data_rank=5), np.arange(PER_HOST), [3]) is None  # one peer's stall


def test_too_few_peers_say_nothing() -> None:
    assert _host_side_shared(_frame(60.0), np.arange(2), [0]) is None
