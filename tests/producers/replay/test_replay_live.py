"""A replayed trace judged by the detect engine in process (decode -> chunks -> FleetEngine, as the worker does):
what `steplens replay` shows live, without Kafka (tests/producers/replay/test_replay_integration.py has it)."""

from __future__ import annotations

import numpy as np

from producers.replay import Replay, from_profiles
from schemas import Incident, encode
from streams.profiles.model import COMMUNICATION, COMPUTE, Collective, Kernels, Profile, Step
from tests.streams.helpers import feed_engine

NOW = 1_800_000_000_000_000_000


def _opened(replay: Replay) -> list[Incident]:
    batches = [[encode(replay.start)], *([encode(e) for e in s.events] for s in replay.steps), [encode(replay.end)]]
    return [o for o in feed_engine(batches, drain_ticks=60) if isinstance(o, Incident) and o.state == "open"]


def _rank(rank: int, world: int, step_start_ms: float, compute_ms: tuple[float, float],
          reduce_ms: tuple[float, float]) -> Profile:
    """One profiled step (7) ending at 1,500 ms: a compute kernel, then an all-reduce ending at 1,300 ms."""
    p = Profile(source=f"rank{rank}.json", format="kineto", rank=rank, world=world)
    p.names.id("gemm")
    spans = np.array([compute_ms, reduce_ms]) * 1e3  # µs, the trace's unit
    p.kernels = Kernels(spans[:, 0].copy(), spans[:, 1].copy(), np.array([COMPUTE, COMMUNICATION], np.int8),
                        np.zeros(2, np.int32), np.zeros(2, np.int32), np.full(2, -1, np.int64))
    p.steps = [Step(7, step_start_ms * 1e3, (1_500.0 - step_start_ms) * 1e3)]
    p.collectives = [Collective("ncclKernel_AllReduce", "allreduce", float(spans[1, 0]), float(spans[1, 1]),
                                float(1 << 20), "pg", 0)]
    return p


def test_a_late_arriver_whose_step_range_opens_late_is_a_slow_rank_live() -> None:
    """8 ranks released together at 1,000 ms; rank 7 computes 180 ms where its peers compute 90 and wait for
    it in the all-reduce, but its own step range opens only at 1,090 ms (the outside trace of issue #45: steps
    ending together, starting apart). Before, its busy time in its range equalled its peers' and live
    detection named nobody; offline the late arrival was plain."""
    ranks = [_rank(r, 8, 1_000.0, (1_010.0, 90.0), (1_100.0, 200.0)) for r in range(7)]
    ranks.append(_rank(7, 8, 1_090.0, (1_010.0, 180.0), (1_190.0, 110.0)))
    opened = _opened(from_profiles(ranks, "job-late", NOW, repeats=20))
    slow = [i for i in opened if i.rule == "SLOW_RANK"]
    assert [i.ranks for i in slow] == [[7]], [(i.rule, i.ranks, i.summary) for i in opened]
    assert "busy 390 ms vs group median 300 ms" in slow[0].summary
