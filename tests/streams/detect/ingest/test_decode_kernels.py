"""The decode stage's kernel-summary chunks: they carry the world their events state, and a
summary whose rank lies outside that world is out of contract (counted bad, never a row)."""

from __future__ import annotations

import numpy as np
import orjson

from schemas import KernelAggregate, KernelSummary, encode
from streams.detect.ingest.decode import decode_batch


def _summary(rank: int, world: int) -> bytes:
    return encode(KernelSummary(job="j", rank=rank, world=world, host="node-0", device=rank, step=3,
                                entries=[KernelAggregate(key="mm", cat="compute", count=1, total_ns=1000)]))


def test_kernel_chunks_carry_the_stated_world() -> None:
    chunks, stats = decode_batch([_summary(0, 8), _summary(5, 8)], 1 << 20)
    [chunk] = chunks
    assert (chunk["kind"], chunk["world"], np.asarray(chunk["rank"]).tolist()) == ("kernels", 8, [0, 5])
    assert stats.bad == 0


def test_a_summary_for_a_rank_outside_its_world_is_bad() -> None:
    bad = orjson.loads(_summary(1, 8))
    bad["rank"] = 8  # rank == world: out of contract
    chunks, stats = decode_batch([_summary(1, 8), orjson.dumps(bad)], 1 << 20)
    assert chunks[0]["rank"] == [1]
    assert stats.bad == 1
