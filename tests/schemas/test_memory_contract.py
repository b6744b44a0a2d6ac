"""Contract 1.5: the model's shape on a job's `start`, a step's device memory peak and reserved bytes.

Optional fields: 1.0-1.4 producers stay valid; a reader of 1.5 rejects what is out of range or unknown
within its minor and takes unknown fields of a newer minor, as for every minor before."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from schemas import ContractError, JobEvent, ModelShape, StepEvent, decode, encode
from schemas.version import CONTRACT_VERSION
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import step_event

START: dict[str, Any] = {"type": "job", "v": "1.5", "job": "llama", "phase": "start", "world": 64,
                         "ts_ns": 1_763_856_000_000_000_000, "parallel": {"dp": 8, "tp": 8}}
SHAPE: dict[str, Any] = {"params": 7_000_000_000, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                         "ffn": 11008, "seq": 4096, "micro_batch": 1, "vocab": 32000, "precision": 2,
                         "param_bytes": 2, "state_bytes": 4, "optimizer": "adam", "master_weights": True,
                         "recompute": "selective", "activation": "swiglu", "attention": "flash", "dropout": False,
                         "sp": True, "zero_stage": 1, "zero_degree": 8, "grad_accum": 4, "microbatches": 8,
                         "grad_lifetime": "keep", "ddp_buckets": False, "optimizer_impl": "fused"}


def _step(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(encode(step_event(0, 5, 300.0)))
    doc.update(over)
    return doc


def test_contract_is_1_5() -> None:
    assert tuple(map(int, CONTRACT_VERSION.split("."))) >= (1, 5)


def test_every_shape_field_decodes_and_round_trips() -> None:
    event = decode(orjson.dumps({**START, "model_shape": SHAPE}))
    assert isinstance(event, JobEvent) and event.model_shape is not None
    assert event.model_shape.known() == SHAPE
    assert decode(encode(event)) == event


def test_older_producers_stay_valid() -> None:
    for v in ("1.0", "1.3", "1.4"):
        job = decode(orjson.dumps({**START, "v": v}))
        step = decode(orjson.dumps(_step(v=v)))
        assert isinstance(job, JobEvent) and job.model_shape is None
        assert isinstance(step, StepEvent) and step.mem_peak_bytes is None and step.mem_reserved_bytes is None


@pytest.mark.parametrize(("field", "value"), [
    ("layers", 0), ("hidden", -1), ("params", 2**60), ("seq", 2**40), ("zero_stage", 4), ("precision", 3),
    ("state_bytes", 16), ("optimizer", "lion"), ("recompute", True), ("sp", 1), ("micro_batch", 1.5),
    ("heads", "32"), ("colour", "red"),
])
def test_a_shape_out_of_contract_is_rejected_by_contract_and_detect(field: str, value: object) -> None:
    raw = orjson.dumps({**START, "model_shape": {**SHAPE, field: value}})
    with pytest.raises(ContractError) as err:
        decode(raw)
    assert err.value.field == f"model_shape.{field}"
    chunks, stats = decode_batch([raw], 1 << 20)
    assert stats.bad == 1 and chunks == []


def test_more_kv_heads_than_heads_is_rejected() -> None:
    with pytest.raises(ContractError, match="kv_heads"):
        decode(orjson.dumps({**START, "model_shape": {"heads": 8, "kv_heads": 16}}))


def test_a_newer_minor_s_shape_fields_are_ignored() -> None:
    raw = orjson.dumps({**START, "v": "1.9", "model_shape": {"layers": 2, "moe_experts": 64}})
    event = decode(raw)
    assert isinstance(event, JobEvent) and event.model_shape == ModelShape(layers=2)
    (chunk,), _ = decode_batch([raw], 1 << 20)
    assert chunk["model_shape"] == {"layers": 2}  # type: ignore[typeddict-item]


def test_detect_carries_the_shape_on_the_job_chunk() -> None:
    (chunk,), stats = decode_batch([orjson.dumps({**START, "model_shape": SHAPE})], 1 << 20)
    assert stats.bad == 0 and chunk["model_shape"] == SHAPE  # type: ignore[typeddict-item]
    (plain,), _ = decode_batch([orjson.dumps(START)], 1 << 20)
    assert "model_shape" not in plain


def test_step_memory_decodes() -> None:
    event = decode(orjson.dumps(_step(v="1.5", mem_peak_bytes=70 * 2**30, mem_reserved_bytes=0)))
    assert isinstance(event, StepEvent) and (event.mem_peak_bytes, event.mem_reserved_bytes) == (70 * 2**30, 0)


@pytest.mark.parametrize("field", ["mem_peak_bytes", "mem_reserved_bytes", "mem_capacity_bytes"])
@pytest.mark.parametrize("value", [-1, 2**63, 1.5, "7", True])
def test_step_memory_out_of_contract_is_rejected(field: str, value: object) -> None:
    with pytest.raises(ContractError) as err:
        decode(orjson.dumps(_step(**{field: value})))
    assert err.value.field == field
