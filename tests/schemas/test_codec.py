import orjson
import pytest

from schemas import (
    CONTRACT_VERSION,
    ContractError,
    ControlCommand,
    DeviceSample,
    Domain,
    Incident,
    JobEvent,
    KernelAggregate,
    KernelBatch,
    KernelRecord,
    KernelSummary,
    Phases,
    ProfileReady,
    StepEvent,
    decode,
    decode_as,
    encode,
)

T0 = 1_763_856_000_000_000_000
IDENT = dict(job="llama-70b", rank=3, world=64, host="node-0", device=3,
             domains={"dp": Domain(group=0, size=8, index=0), "tp": Domain(group=0, size=4, index=3)})

EVENTS = [
    StepEvent(**IDENT, step=7, start_ns=T0, end_ns=T0 + 512_000_000,
              phases=Phases(data_ms=21.5, forward_ms=120.0, backward_ms=240.0, comm_exposed_ms=44.0, gc_ms=3.0),
              tokens=4096, samples=1, batch_size=1, flops=1.2e15, peak_flops=3.13e14, gc_count=1),
    KernelBatch(**IDENT, step=7, dropped=2, kernels=[
        KernelRecord(name="aclnnMatmul", cat="compute", start_ns=T0 + 1000, dur_ns=250_000, submit_ns=T0 + 900,
                     metric="F2", shape={"B": 1, "M": 4096, "N": 8192, "K": 8192}),
        KernelRecord(name="hcclAllReduce", cat="comm", start_ns=T0 + 2000, dur_ns=3_000_000, op="allreduce",
                     bytes=268_435_456, count=134_217_728, dtype="bf16", domain="dp", group_name="dp-0",
                     group_size=8),
        KernelRecord(name="aclrtMemcpyAsync", cat="memcpy", start_ns=T0 + 3000, dur_ns=80_000, bytes=1 << 24,
                     direction="h2d", metric="T9"),
    ]),
    KernelSummary(**IDENT, step=7, other_count=12, other_ns=900_000, entries=[
        KernelAggregate(key="F2:1x4096x8192x8192", cat="compute", metric="F2", count=4, total_ns=1_000_000,
                        max_ns=260_000, flops=2.2e12, shape={"B": 1, "M": 4096, "N": 8192, "K": 8192},
                        launch_mean_us=10.0, launch_mad_us=0.5),
        KernelAggregate(key="allreduce/dp", cat="comm", metric="G1", op="allreduce", domain="dp", group_size=8,
                        count=1, total_ns=3_000_000, bytes=268_435_456),
    ]),
    DeviceSample(host="node-0", device=3, ts_ns=T0, job="llama-70b", rank=3, power_w=310.0, temp_c=61.5,
                 aicore_pct=87.0, mem_pct=71.0, membw_pct=40.0),
    ProfileReady(job="llama-70b", rank=3, host="node-0", format="ascend_pt", uri="/shared/prof/r3", step_first=8,
                 step_last=12, ts_ns=T0, bytes=10_000, command_id="c1"),
    Incident(incident_id="SLOW_RANK:llama-70b:r3:s5", job="llama-70b", rule="SLOW_RANK", state="open",
             severity="critical", scope="rank", summary="rank 3 is slow", detected_ns=T0, ranks=[3],
             step_first=5, step_last=7, observed=520.0, expected=400.0, unit="ms", evidence={"wait_ratio": 0.21},
             rules=["SLOW_RANK", "R5"]),
    ControlCommand(command_id="c1", job="llama-70b", action="profile_on", ranks=[3], step_first=8, step_count=5,
                   issued_ns=T0, incident_id="SLOW_RANK:llama-70b:r3:s5"),
    JobEvent(job="llama-70b", phase="start", world=64, ts_ns=T0, parallel={"dp": 8, "tp": 4, "pp": 2}),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).TYPE)
def test_round_trip(event: object) -> None:
    raw = encode(event)  # type: ignore[arg-type]
    body = orjson.loads(raw)
    assert body["type"] == type(event).TYPE and body["v"] == CONTRACT_VERSION
    assert None not in body.values(), "nulls are left out on the wire"
    assert decode(raw) == event
    assert decode_as(type(event), raw) == event


def _mutate(event: object, **changes: object) -> bytes:
    body = orjson.loads(encode(event))  # type: ignore[arg-type]
    for path, value in changes.items():
        target = body
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is KeyError:
            del target[leaf]
        else:
            target[leaf] = value
    return orjson.dumps(body)


STEP, KERNELS = EVENTS[0], EVENTS[1]


@pytest.mark.parametrize(
    ("raw", "field", "problem"),
    [
        (b"\xff\xfe", "<payload>", "is not valid JSON"),
        (b"42", "<payload>", "must be a JSON object"),
        (b'{"v":"1.0"}', "type", "is required"),
        (b'{"type":"nope","v":"1.0"}', "type", "unknown event type 'nope'"),
        (_mutate(STEP, v=KeyError), "v", "is required"),
        (_mutate(STEP, v="2.0"), "v", "unsupported major version 2"),
        (_mutate(STEP, v="one"), "v", f"must look like '{CONTRACT_VERSION}'"),
        (_mutate(STEP, step=KeyError), "step", "is required"),
        (_mutate(STEP, step="7"), "step", "must be an integer, got str"),
        (_mutate(STEP, step=True), "step", "must be an integer, got bool"),
        (_mutate(STEP, end_ns=1), "end_ns", "must be >= start_ns"),
        (_mutate(STEP, rank=64), "rank", "must be in [0, world=64)"),
        (_mutate(STEP, job=""), "job", "must not be empty"),
        (_mutate(STEP, phases__gc_ms=-1), "phases.gc_ms", "must be >= 0 ms"),
        (_mutate(STEP, phases__gc_ms=None), "phases.gc_ms", None),
        (_mutate(STEP, domains__xp={"group": 0, "size": 2, "index": 0}), "domains.xp", "unknown domain type"),
        (_mutate(STEP, domains__dp__index=8), "domains.dp.index", "must be in [0, size=8)"),
        (_mutate(STEP, colour="red"), "colour", "unknown field for this contract version"),
        (_mutate(KERNELS, kernels__1__op=KeyError), "kernels[1].op", "is required for cat 'comm'"),
        (_mutate(KERNELS, kernels__0__cat="gpu"), "kernels[0].cat", "must be one of"),
        (_mutate(KERNELS, kernels__2__dur_ns=-5), "kernels[2].dur_ns", "must be >= 0"),
        (_mutate(KERNELS, kernels="x"), "kernels", "must be a list"),
    ],
)
def test_rejections_name_field_and_problem(raw: bytes, field: str, problem: str | None) -> None:
    if problem is None:  # explicit null for an optional field is allowed
        decode(raw)
        return
    with pytest.raises(ContractError) as err:
        decode(raw)
    assert err.value.field == field
    assert problem in err.value.problem
    assert str(err.value).startswith(f"field '{field}': ")


def test_newer_minor_is_accepted_and_unknown_fields_ignored() -> None:
    raw = _mutate(STEP, v="1.9", colour="red", phases__npu_util=0.5)
    assert decode(raw) == STEP


def test_newer_minor_still_validates_known_fields() -> None:
    with pytest.raises(ContractError, match="field 'step'"):
        decode(_mutate(STEP, v="1.9", step=-1))


def test_oversized_is_rejected_before_parsing() -> None:
    with pytest.raises(ContractError, match="larger than the 100-byte limit"):
        decode(encode(STEP), max_bytes=100)


def test_decode_as_rejects_other_type() -> None:
    with pytest.raises(ContractError, match="this topic carries 'job' events, got 'step'"):
        decode_as(JobEvent, encode(STEP))


def test_infinity_is_rejected() -> None:
    raw = encode(STEP).replace(b'"gc_ms":3.0', b'"gc_ms":1e999')
    with pytest.raises(ContractError, match="number is infinity"):
        decode(raw)
