"""The landing shortcut (`sinks.fast_rows`) is never a second contract.

Property: for any message, the fast mapping either declines (None: the full path decides)
or gives exactly the rows the full path (`schemas.decode_as` + `sinks.rows.rows_for`) gives,
which must then accept the message. Checked on the docs' examples, on the throughput
bench's events, on the contract fuzzer's malformed messages and on nested mutations
(domains, phases, kernel aggregates) drawn here; derandomised, so CI sees the same cases.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.throughput import Job
from schemas import ContractError, DeviceSample, KernelSummary, StepEvent, Topics, decode_as
from sinks import rows
from sinks.fast_rows import FAST_ROWS
from sinks.rows import RowError, TableRow
from streams.land.processor import Landed, LandingProcessor
from tests.schemas.test_contract_fuzz import EXAMPLES, _dumps, json_value, malformed, out_of_range

CLASSES: dict[str, type[Any]] = {"step": StepEvent, "kernel_summary": KernelSummary, "device": DeviceSample}
INGESTED = 1_767_225_600_123_456_789
JOB = Job("fast-rows", 64)
BENCH_DOCS = [orjson.loads(value)
              for _, _, value in JOB.step(3, 0.0, packed=False) + JOB.step(15, 300.0, packed=False)][:96]
VALID = [d for d in EXAMPLES if d.get("type") in CLASSES] + BENCH_DOCS


def full_path(kind: str, raw: bytes) -> list[TableRow] | None:
    try:
        return rows.rows_for(decode_as(CLASSES[kind], raw), INGESTED)
    except (ContractError, RowError):
        return None


def check(doc: object, raw: bytes | None = None) -> str:
    """'fast' when the shortcut mapped it (identically to the full path), else 'declined'."""
    if not isinstance(doc, dict):
        return "declined"
    kind = doc.get("type")
    if not isinstance(kind, str) or kind not in FAST_ROWS:
        return "declined"
    fast = FAST_ROWS[kind](doc, INGESTED)
    if fast is None:
        return "declined"
    slow = full_path(kind, raw if raw is not None else _dumps(doc))
    assert slow is not None, f"the shortcut accepted what the contract refuses: {doc!r}"[:2000]
    assert fast == slow, f"rows differ for {doc!r}"[:2000]
    return "fast"


def test_valid_examples_and_bench_events_take_the_shortcut_with_identical_rows() -> None:
    assert {d["type"] for d in VALID} == set(CLASSES)
    for doc in VALID:
        assert check(doc) == "fast", doc


# paths into the nested parts the top-level fuzzer never reaches
def _paths(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [(k,) for k in doc]
    for name, dom in (doc.get("domains") or {}).items():
        out += [("domains", name)] + [("domains", name, k) for k in dom]
    out += [("phases", k) for k in doc.get("phases") or {}]
    for i, entry in enumerate(doc.get("entries") or []):
        out += [("entries", i)] + [("entries", i, k) for k in entry]
    return out


@st.composite
def nested_mutation(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(VALID)))
    path = draw(st.sampled_from(_paths(doc)))
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = draw(st.sampled_from(["value", "range", "drop", "extra", "null", "float", "bool", "edge", "edge"]))
    if action == "edge":  # next to a bound the contract or a column draws
        here = parent[last]
        near: list[float] = [0, -1, 1, 100, 2**15 - 1, 2**15,
                             2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1]
        if isinstance(here, (int, float)) and not isinstance(here, bool):
            near += [here - 1, here + 1, here + 0.5, -here]
        near += [v for v in (doc.get("world"), parent.get("size") if isinstance(parent, dict) else None) if v]
        parent[last] = draw(st.sampled_from([*near, -0.0, 100.0001, 1e-300, -1e-9]))
    elif action == "drop":
        del parent[last]
    elif action == "extra":
        target = parent[last] if isinstance(parent[last], dict) else parent
        target[draw(st.sampled_from(["x", "", "group", "pp", "zz", "shape", "index"]))] = draw(json_value)
    elif action == "range":
        parent[last] = draw(out_of_range)
    elif action == "null":
        parent[last] = None
    elif action == "float":
        parent[last] = draw(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20))
    elif action == "bool":
        parent[last] = draw(st.booleans())
    else:
        parent[last] = draw(json_value)
    return doc


def test_nested_mutations_are_declined_or_mapped_exactly_as_the_full_path_maps_them() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate))
    @given(st.lists(nested_mutation(), min_size=20, max_size=20))
    def run(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            outcomes[check(doc)] += 1

    run()
    assert outcomes["fast"] >= 100 and outcomes["declined"] >= 500, outcomes  # both sides were exercised


def test_the_contract_fuzzers_messages_are_declined_or_mapped_exactly() -> None:
    outcomes: Counter[str] = Counter()

    @settings(max_examples=100, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate))
    @given(st.lists(malformed(), min_size=20, max_size=20))
    def run(cases: list[tuple[str, object]]) -> None:
        for _, raw in cases:
            if not isinstance(raw, bytes) or len(raw) > 1_048_576:
                continue
            try:
                doc = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            outcomes[check(doc, raw)] += 1

    run()
    assert outcomes["fast"] >= 20 and outcomes["declined"] >= 200, outcomes


def test_the_processor_lands_or_dead_letters_the_same_with_and_without_the_shortcut() -> None:
    topics = Topics("p.")
    topic_of = {"step": topics.steps, "kernel_summary": topics.kernel_summaries, "device": topics.device}
    broken = copy.deepcopy(BENCH_DOCS[0])
    broken["domains"]["tp"]["index"] = 99  # out of contract: a dead letter either way
    docs = [*VALID, broken, {**VALID[0], "v": "1.7", "later": 1}]  # a newer minor: valid, full path only
    outs = []
    for fast in (True, False):
        processor = LandingProcessor(topics, 1_048_576, fast=fast)
        out = Landed()
        for offset, doc in enumerate(docs):
            processor.process(topic_of[doc["type"]], 0, offset, b"k", _dumps(doc), INGESTED, out)
        outs.append((out.rows, out.sources, [(d.offset, d.field, d.problem) for d in out.dead], processor.counts))
    assert outs[0] == outs[1]
    assert [d[0] for d in outs[0][2]] == [len(VALID)]  # only the broken one is dead
