"""The chunk TypedDicts say what the decode stage writes: every key of each kind, the contract's columns among them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from schemas import DeviceSample, JobEvent, KernelAggregate, KernelSummary, ModelShape, encode
from schemas.columns import DEVICE_METRICS, DOMAINS, PHASES
from streams.detect.combine.chunks import (
    DeviceChunk,
    JobChunk,
    JobShape,
    KernelChunk,
    Progress,
    StepChunk,
    StepMemory,
    dumps,
    is_device,
    is_job,
    is_kernels,
    is_steps,
    loads,
)
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import step_event

EVENTS = [
    encode(JobEvent(job="j", phase="start", world=8, ts_ns=10**18, model_shape=ModelShape(layers=2, hidden=64))),
    encode(step_event(1, 3, 400.0)),
    encode(replace(step_event(2, 3, 400.0), mem_peak_bytes=2**30, mem_reserved_bytes=2**31)),
    encode(KernelSummary(job="j", rank=1, world=8, host="node-0", device=1, step=3,
                         entries=[KernelAggregate(key="mm", cat="compute", count=1, total_ns=1000)])),
    encode(DeviceSample(host="node-0", device=1, ts_ns=10**18, power_w=300.0, job="j", rank=1)),
    encode(JobEvent(job="j", phase="end", world=8, ts_ns=2 * 10**18, last_step=3)),
]


def _keys(cls: Any) -> frozenset[str]:
    return frozenset(cls.__required_keys__)


def test_each_decoded_kind_has_exactly_its_typed_keys() -> None:
    chunks, stats = decode_batch(EVENTS, 1 << 20)
    assert stats.bad == 0
    by_kind = {(c["kind"], c.get("phase")): c for c in chunks}
    assert set(by_kind) == {("job", "start"), ("steps", None), ("kernels", None), ("device", None), ("job", "end")}
    for (kind, phase), chunk in by_kind.items():
        cls = {"steps": StepChunk, "kernels": KernelChunk, "device": DeviceChunk, "job": JobChunk}[kind]
        # contract 1.5's optional keys, when sent: the steps' memory, the start's model shape
        sent = {"steps": set(StepMemory.__optional_keys__)}.get(kind, set())
        sent |= set(JobShape.__optional_keys__) if (kind, phase) == ("job", "start") else set()
        assert set(chunk) == _keys(cls) | sent, kind
        assert [is_steps(chunk), is_kernels(chunk), is_device(chunk), is_job(chunk)].count(True) == 1
        assert loads(dumps(chunk)).keys() == chunk.keys(), "a TypedDict is the dict on the wire"


def test_the_columns_are_the_contracts() -> None:
    assert {f"{p}" for p in PHASES} | {f"{g}_{d}" for d in DOMAINS for g in "gn"} <= _keys(StepChunk)
    assert set(DEVICE_METRICS) <= _keys(DeviceChunk)


def test_progress_is_optional_on_every_kind() -> None:
    for cls in (StepChunk, KernelChunk, DeviceChunk, JobChunk):
        own = {StepChunk: set(StepMemory.__optional_keys__), JobChunk: set(JobShape.__optional_keys__)}.get(cls, set())
        assert set(Progress.__optional_keys__) | own == set(cls.__optional_keys__)
