"""The timeline export: a valid Chrome trace-event document, one slice per phase, kernels and instants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas import Phases
from sinks.backend import Backend
from steplens.cli import EXIT_OK, main
from tests.steplens.fleet_data import Truth, incidents, step_events

PHASES = {"B", "E", "X", "i", "I", "M", "C"}


def check_trace_event_format(trace: dict[str, Any]) -> None:
    """The JSON Object Format of the Trace Event Format spec: what chrome://tracing and Perfetto read."""
    assert isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in (None, "ms", "ns")
    for event in trace["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            assert isinstance(event["args"], dict)
            continue
        assert isinstance(event["ts"], int | float)
        if event["ph"] == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0
        if event["ph"] in ("i", "I"):
            assert event.get("s", "t") in ("g", "p", "t")
        assert isinstance(event.get("args", {}), dict)


def test_timeline_of_ranks_and_steps(fleet: tuple[Backend, Truth], tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    assert main(["timeline", "--job", "job-a", "--ranks", "0-3", "--steps", "9-12", "-o", str(out)]) == EXIT_OK
    trace = orjson.loads(out.read_bytes())
    check_trace_event_format(trace)
    events = trace["traceEvents"]
    selected = [e for e in step_events("job-a", 0) if e.rank <= 3 and 9 <= e.step <= 12]
    phases = [e for e in events if e.get("cat") == "phase"]
    expected = sum(1 for s in selected for name in Phases.NAMES if getattr(s.phases, name) is not None)
    assert len(phases) == expected  # one slice per measured phase
    for s in selected:
        mine = sorted(e["name"] for e in phases if e["pid"] == s.rank and e["args"]["step"] == s.step)
        assert mine == sorted(n.removesuffix("_ms") for n in Phases.NAMES if getattr(s.phases, n) is not None)
    assert len([e for e in events if e.get("cat") == "step"]) == len(selected)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {r: f"rank {r} (h0)" for r in range(4)}  # one process per rank
    assert len([e for e in events if str(e.get("cat", "")).startswith("kernel")]) == 6  # rank 0, steps 10-11
    instants = [(e["cat"], e["pid"]) for e in events if e["ph"] == "i"]
    assert ("control", 0) in instants  # the profile_on command for rank 0
    # job-a's slow-rank incidents (steps 3-9) name ranks 5 and 9, not exported: shown on every exported rank
    overlapping = [i for i in incidents() if i.job == "job-a" and (i.step_last or 0) >= 9 and (i.step_first or 0) <= 12]
    assert sorted(pid for cat, pid in instants if cat == "incident") == sorted([0, 1, 2, 3] * len(overlapping))


@pytest.mark.parametrize("bad", ["3-1", "x", "-2"])
def test_bad_ranges_are_usage_errors(bad: str) -> None:
    assert main(["timeline", "--job", "j", "--ranks", bad, "--steps", "0"]) == 2
