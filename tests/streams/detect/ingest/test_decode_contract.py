"""The decode stage never lets through an event the contract rejects for a field detection reads.

Detection decodes a few fields cheaply (streams/detect/ingest/decode.py) and landing decodes fully
(schemas.decode) and dead-letters; when the two disagree on identity, version or time fields,
detect acts on events that are stored nowhere. `make chaos` found that once: forged rank-0 steps
with version "1.²" or `end_ns` 2^64-1 reached the engine and opened phantom HUNG_RANK incidents.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bench.chaos_inputs import KINDS, malformed
from schemas import ContractError, DeviceSample, JobEvent, decode, encode
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import step_event

MAX_BYTES = 1 << 20


def _contract_accepts(raw: bytes) -> bool:
    try:
        decode(raw, MAX_BYTES)
    except ContractError:
        return False
    return True


def _detect_accepts(raw: bytes) -> bool:
    chunks, stats = decode_batch([raw], MAX_BYTES)
    assert bool(chunks) != bool(stats.bad), (chunks, stats)  # one event: either a chunk or counted bad
    return bool(chunks)


@pytest.mark.parametrize("topic_kind", ["steps", "jobs"])
@pytest.mark.parametrize("kind", KINDS)
def test_what_chaos_sends_and_the_contract_rejects_never_reaches_the_engine(topic_kind: str, kind: str) -> None:
    _, _, value = malformed(topic_kind, "chaos-malformed", KINDS.index(kind), 0)
    if value is None:  # a tombstone: neither side has an event
        assert decode_batch([value], MAX_BYTES)[0] == []  # type: ignore[list-item]
        return
    if not _contract_accepts(value):
        assert not _detect_accepts(value), value[:200]


STEP = orjson.loads(encode(step_event(1, 3, 400.0)))
DEVICE = orjson.loads(encode(DeviceSample(host="node-0", device=3, ts_ns=10**18, power_w=300.0)))
JOB = orjson.loads(encode(JobEvent(job="job-a", phase="start", world=8, ts_ns=10**18)))

MUTATIONS: list[tuple[str, dict[str, Any], str, Any]] = [
    ("step", STEP, "v", "1.²"),
    ("step", STEP, "v", "١.٠"),
    ("step", STEP, "v", "1." + "9" * 5000),
    ("step", STEP, "v", "2.0"),
    ("step", STEP, "v", "1"),
    ("step", STEP, "v", 1.0),
    ("step", STEP, "end_ns", 2**64 - 1),
    ("step", STEP, "end_ns", 2**63),
    ("step", STEP, "step", 2**63),
    ("step", STEP, "rank", -1),
    ("step", STEP, "world", 2**32),
    ("device", DEVICE, "ts_ns", 2**63),
    ("device", DEVICE, "device", 2**16),
    ("device", DEVICE, "v", "1.²"),
    ("job", JOB, "world", 2**32),
    ("job", JOB, "ts_ns", 2**64 - 1),
    ("job", JOB, "last_step", -1),
    ("job", JOB, "v", "0.9"),
]


@pytest.mark.parametrize(("what", "base", "name", "value"), MUTATIONS,
                         ids=[f"{w}-{n}-{str(v)[:12]}" for w, _, n, v in MUTATIONS])
def test_an_identity_version_or_time_field_out_of_contract_is_skipped_by_both(
        what: str, base: dict[str, Any], name: str, value: Any) -> None:
    raw = orjson.dumps({**base, name: value})
    assert _contract_accepts(orjson.dumps(base)) and _detect_accepts(orjson.dumps(base)), what
    assert not _contract_accepts(raw), f"{what}.{name}={value!r}"
    assert not _detect_accepts(raw), f"{what}.{name}={value!r} reached the engine"


@pytest.mark.parametrize("version", ["1.0", "1.3", "1.99"])
def test_versions_the_contract_accepts_are_accepted(version: str) -> None:
    raw = orjson.dumps({**STEP, "v": version})
    assert _contract_accepts(raw) and _detect_accepts(raw)
