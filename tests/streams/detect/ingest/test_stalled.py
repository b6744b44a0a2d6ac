"""A decode stage stalled by a rebalance tells the engines, so that no frame times out on the silence (pure)."""

from __future__ import annotations

import numpy as np

from infra.settings import load_settings
from streams.detect.combine import chunks as codec
from streams.detect.config import DetectionConfig
from streams.detect.engine import FleetEngine
from streams.detect.ingest.loop import DecodeLoop
from streams.metrics import DetectMetrics
from tests.streams.helpers import T0, step_event


class Producer:
    """The decode producer's surface `while_held` uses: the partials topic's partitions, and sends."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.sent: list[tuple[str, bytes, int]] = []

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def send(self, topic: str, value: bytes, partition: int) -> None:
        self.sent.append((topic, value, partition))


def test_a_held_decode_stage_tells_every_partials_partition_once_a_second() -> None:
    loop = DecodeLoop(load_settings(env={}), DetectMetrics())
    producer = Producer(4)
    loop._out = producer
    loop.while_held(None)  # type: ignore[arg-type]
    loop.while_held(None)  # type: ignore[arg-type]  # within the second: nothing more
    assert sorted(p for _, _, p in producer.sent) == [0, 1, 2, 3]
    assert {t for t, _, _ in producer.sent} == {loop.partials}
    loop._stalled_sent -= 1.0
    loop.while_held(None)  # type: ignore[arg-type]
    assert len(producer.sent) == 8


def test_the_engine_lets_no_frame_time_out_while_the_decode_stage_says_it_is_stalled() -> None:
    from schemas import encode
    from streams.detect.ingest.decode import decode_batch

    loop = DecodeLoop(load_settings(env={}), DetectMetrics())
    producer = Producer(1)
    loop._out = producer

    def fleet_with_half_a_step() -> tuple[FleetEngine, int]:
        fleet = FleetEngine(DetectionConfig())
        chunks, _ = decode_batch([encode(step_event(r, 0, 100.0, world=4, dp_size=4)) for r in range(2)], 1 << 20)
        for chunk in chunks:
            chunk["behind_ns"], chunk["lag"], chunk["decoded_ns"] = 0, 0, T0
            fleet.on_chunk(codec.loads(codec.dumps(chunk)), T0)
        return fleet, T0

    quiet, now = fleet_with_half_a_step()  # ranks 2 and 3 of step 0 not in yet, nothing said
    for _ in range(20):
        now += 500_000_000
        quiet.tick(now)
    assert not quiet.jobs["job-a"].frames.frames  # released after its 5-s timeout, incomplete

    told, now = fleet_with_half_a_step()
    for i in range(20):  # ten seconds of a rebalance, the decode stage held all along
        now += 500_000_000
        if i % 2 == 0:
            loop._stalled_sent = 0.0
            loop.while_held(None)  # type: ignore[arg-type]
            told.on_chunk(codec.loads(producer.sent[-1][1]), now)
        told.tick(now)
    frames = told.jobs["job-a"].frames.frames
    assert frames and bool(np.asarray(next(iter(frames.values())).seen).sum() == 2)  # still waiting for 2 and 3
