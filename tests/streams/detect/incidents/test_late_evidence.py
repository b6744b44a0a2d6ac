"""Late evidence: a device's samples released after the incident of their time resolved (device samples travel on
their own topic and often reach the engine several steps behind the steps) are that incident's evidence, not a new
incident (streams/detect/incidents/book.py `_held_by_then`, dated by streams/detect/engine.py)."""

from __future__ import annotations

from schemas import Incident
from streams.detect.incidents.book import IncidentBook
from streams.detect.scopes.finding import Finding

GROUP = [25, 27, 29, 31]


def _group(step: int) -> Finding:
    return Finding(rule="SLOW_GROUP", key="group:ep/7", scope="group", step=step, summary="EP group 7 split",
                   ranks=list(GROUP), domain="ep", group=7, open_after=3, resolve_after=2)


def _device(step: int, since: int | None, rank: int = 29) -> Finding:
    # an idle expert's device: R1 opens at once (critical), as streams/detect/signals/device.py builds it
    return Finding(rule="R1", key="device:node-3/5", scope="device", step=step, summary="aicore_pct at 18.0",
                   severity="critical", ranks=[rank], host="node-3", device=5, open_after=1, since_step=since)


def _run(plan: dict[int, list[Finding]]) -> list[Incident]:
    book = IncidentBook(job="j")
    out: list[Incident] = []
    for step in range(60, 120):
        out += [o for o in book.observe(step, plan.get(step, []), step) if isinstance(o, Incident)]
    return out


def _plan() -> dict[int, list[Finding]]:
    return {s: [_group(s)] for s in range(60, 91)}  # flagged 60-90: open at 62, resolved at 92


def test_a_devices_sample_from_before_the_resolve_joins_the_resolved_incident() -> None:
    plan = _plan()
    plan[98] = [_device(98, since=90)]  # released at step 98, taken during step 90
    out = _run(plan)
    assert len({o.incident_id for o in out}) == 1
    assert [o.state for o in out if o.state != "update"] == ["open", "resolved"]


def test_a_devices_sample_from_after_the_resolve_opens_an_incident_of_its_own_time() -> None:
    plan = _plan()
    plan[98] = [_device(98, since=95)]
    out = _run(plan)
    device = [o for o in out if o.rule == "R1"]
    assert device and device[0].state == "open" and device[0].step_first == 95


def test_a_late_sample_of_another_rank_is_judged_as_any_other() -> None:
    plan = _plan()
    plan[98] = [_device(98, since=90, rank=40)]
    assert any(o.rule == "R1" and o.state == "open" for o in _run(plan))


def test_a_sample_of_its_own_step_is_judged_as_any_other() -> None:
    plan = _plan()
    plan[98] = [_device(98, since=None)]
    assert any(o.rule == "R1" and o.state == "open" for o in _run(plan))
