"""An incident's evidence and cause come from the steps that name its most common cause."""

from __future__ import annotations

from schemas import Incident
from streams.detect.incidents.book import IncidentBook
from streams.detect.scopes.finding import Finding


def _slow(step: int, ms: float, cause: str) -> Finding:
    return Finding(rule="SLOW_STEP", key="job", scope="job", step=step, summary=f"{cause} {ms}", observed=ms,
                   cause_phase=cause, cause=f"cause:{cause}", open_after=2, resolve_after=3)


def test_a_checkpoint_inside_a_slow_period_does_not_become_the_cause() -> None:
    book = IncidentBook(job="j")
    out: list[Incident] = []
    for step in range(10, 30):
        f = _slow(step, 3000.0, "interstep_cpu_ms") if step == 20 else _slow(step, 1500.0 + step, "comm_volume")
        out += [o for o in book.observe(step, [f], step) if isinstance(o, Incident)]
    out += [o for o in book.finish(99) if isinstance(o, Incident)]
    last = out[-1]
    assert last.cause == "cause:comm_volume" and last.summary.startswith("comm_volume 1529.0;"), last
    assert last.observed == 1529.0, "the peak among the comm_volume steps"


def test_the_lead_cause_can_change_as_steps_come() -> None:
    book = IncidentBook(job="j")
    out: list[Incident] = []
    causes = ["data_ms"] * 3 + ["gc_ms"] * 6
    for i, cause in enumerate(causes):
        out += [o for o in book.observe(i, [_slow(i, 2000.0 - i, cause)], i) if isinstance(o, Incident)]
    out += [o for o in book.finish(99) if isinstance(o, Incident)]
    assert out[0].cause == "cause:data_ms"
    assert out[-1].cause == "cause:gc_ms" and out[-1].observed == 2000.0 - 3, "the first, highest gc_ms step"
