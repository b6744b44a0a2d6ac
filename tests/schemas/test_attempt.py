"""Contract 1.4: a job's attempt (its launch) on `job`, `step` and `kernel_summary` events."""

from __future__ import annotations

import orjson
import pytest

from producers.hook.identity import launcher_attempt
from schemas import ContractError, JobEvent, KernelSummary, StepEvent, decode, encode
from schemas.version import CONTRACT_VERSION
from streams.detect.ingest.decode import decode_batch
from tests.streams.helpers import step_event


def _doc(event: object) -> dict[str, object]:
    doc: dict[str, object] = orjson.loads(encode(event))  # type: ignore[arg-type]
    return doc


def test_contract_has_attempts() -> None:
    assert tuple(map(int, CONTRACT_VERSION.split("."))) >= (1, 4)  # attempts arrived with 1.4


def test_a_1_3_step_decodes_as_attempt_0() -> None:
    doc = _doc(step_event(0, 5, 300.0))
    doc["v"] = "1.3"
    doc.pop("attempt", None)
    event = decode(orjson.dumps(doc))
    assert isinstance(event, StepEvent) and event.attempt == 0


@pytest.mark.parametrize("bad", [-1, 2**16, "1", 1.5, True])
def test_attempt_out_of_range_or_type_is_rejected_by_contract_and_detect(bad: object) -> None:
    doc = _doc(step_event(0, 5, 300.0))
    doc["attempt"] = bad
    raw = orjson.dumps(doc)
    with pytest.raises(ContractError, match="attempt"):
        decode(raw)
    chunks, stats = decode_batch([raw], 1 << 20)
    assert stats.bad == 1 and chunks == []


def test_attempt_round_trips_on_every_event_that_has_it() -> None:
    start = JobEvent(job="j", phase="start", world=8, ts_ns=1, attempt=3)
    summary = KernelSummary(job="j", rank=0, world=8, host="h", device=0, step=4, entries=[], attempt=3)
    step = StepEvent(job="j", rank=0, world=8, host="h", device=0, step=4, start_ns=1, end_ns=2, attempt=3)
    for event in (start, summary, step):
        back = decode(encode(event))
        assert back == event and back.attempt == 3  # type: ignore[union-attr]


def test_detect_decode_keeps_attempts_apart_and_orders_them() -> None:
    """A batch with an attempt's late last steps and the relaunch's first ones: two chunks, the
    earlier attempt first, each relaunch chunk after its own start."""
    old = _doc(step_event(0, 399, 300.0))
    new = _doc(step_event(0, 300, 300.0))
    new["attempt"] = 1
    start = _doc(JobEvent(job="job-a", phase="start", world=8, ts_ns=1, attempt=1))
    chunks, stats = decode_batch([orjson.dumps(d) for d in (new, start, old)], 1 << 20)
    assert stats.bad == 0
    assert [(c["kind"], c["attempt"]) for c in chunks] == [("steps", 0), ("job", 1), ("steps", 1)]
    assert chunks[0]["step"] == [399] and chunks[2]["step"] == [300]


@pytest.mark.parametrize(("env", "attempt"), [({}, 0), ({"TORCHELASTIC_RESTART_COUNT": "2"}, 2),
                                              ({"TORCHELASTIC_RESTART_COUNT": "x"}, 0),
                                              ({"TORCHELASTIC_RESTART_COUNT": "99999999"}, 0)])
def test_the_hook_takes_the_attempt_from_the_launchers_restart_count(env: dict[str, str], attempt: int) -> None:
    assert launcher_attempt(env) == attempt
