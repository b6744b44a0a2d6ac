"""Ranks of one host slowing one after the other are one host incident (streams/detect/incidents/book.py)."""

from __future__ import annotations

from schemas import Incident
from streams.detect.incidents.book import IncidentBook
from streams.detect.scopes.finding import Finding


def _rank(rank: int, step: int, host: str | None = "node-0", rule: str = "SLOW_RANK") -> Finding:
    return Finding(rule=rule, key=f"rank:{rank}", scope="rank", step=step, summary=rule, ranks=[rank], host=host,
                   open_after=3, resolve_after=3)


def _incidents(book: IncidentBook, plan: dict[int, list[Finding]], steps: range) -> list[Incident]:
    out: list[Incident] = []
    for step in steps:
        out += [o for o in book.observe(step, plan.get(step, []), step) if isinstance(o, Incident)]
    return out


def test_a_second_rank_of_the_host_makes_the_first_ranks_incident_a_host_incident() -> None:
    """Hermes' foreign process: rank 3 slow first, rank 7 a few steps later; no host finding persists."""
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_rank(3, s)] for s in range(60, 75)}
    for s in range(63, 75):
        plan[s].append(_rank(7, s))
    out = _incidents(book, plan, range(60, 85))
    assert len({o.incident_id for o in out}) == 1, "one incident for one host's fault"
    last = out[-1]
    assert (last.scope, last.host, last.state, last.step_first) == ("host", "node-0", "resolved", 60)
    assert {3, 7} <= set(last.ranks)


def test_ranks_of_different_hosts_stay_apart() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_rank(3, s), _rank(12, s, host="node-1")] for s in range(60, 70)}
    out = _incidents(book, plan, range(60, 80))
    assert len({o.incident_id for o in out}) == 2
    assert {o.scope for o in out} == {"rank"}


def test_a_rank_finding_inside_an_open_host_incident_is_absorbed_without_naming_its_host() -> None:
    """R5/R6 joined to a rank of the host (streams/detect/incidents/join.py) carry no host name."""
    book = IncidentBook(job="j", hold_down_steps=10)
    host = [Finding(rule="SLOW_HOST", key="host:node-0", scope="host", step=0, summary="h", ranks=list(range(8)),
                    host="node-0", open_after=3, resolve_after=3)]
    plan = {s: list(host) for s in range(60, 80)}
    for s in range(65, 75):
        plan[s].append(_rank(3, s, host=None, rule="R6"))
    out = _incidents(book, plan, range(60, 90))
    assert len({o.incident_id for o in out}) == 1
    assert out[-1].scope == "host"


def test_a_host_candidate_that_never_opens_leaves_its_ranks_incident_open() -> None:
    book = IncidentBook(job="j", hold_down_steps=10)
    plan = {s: [_rank(3, s)] for s in range(60, 75)}
    plan[66].append(Finding(rule="SLOW_HOST", key="host:node-0", scope="host", step=66, summary="h",
                            ranks=list(range(8)), host="node-0", open_after=3, resolve_after=3))
    out = _incidents(book, plan, range(60, 85))
    assert len({o.incident_id for o in out}) == 1
    assert [o.state for o in out] == ["open", "resolved"], "not resolved as absorbed by a host that never opened"
    assert out[-1].step_last == 74
