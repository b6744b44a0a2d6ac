"""Detection quality against the simulator's ground truth (pure: truth and incidents in, scores out).

`score`/`Score` compare plain sets (the demo). `score_run`/`summarise` judge a fleet run's
incidents against the fault catalogue's ground-truth lines: a fault is detected by any
incident that overlaps its steps (with a little grace) and touches its members; it is
localised when one of those has the fault's scope type and exactly its members; rule
attribution is the share of the expected rule ids found on them; an incident that matches
no fault is a false alarm.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Score:
    """Precision/recall of one detected set against the injected set."""

    truth: frozenset[int]
    found: frozenset[int]

    @property
    def hits(self) -> frozenset[int]:
        return self.truth & self.found

    @property
    def missed(self) -> frozenset[int]:
        return self.truth - self.found

    @property
    def false_alarms(self) -> frozenset[int]:
        return self.found - self.truth

    @property
    def precision(self) -> float:
        return len(self.hits) / len(self.found) if self.found else (1.0 if not self.truth else 0.0)

    @property
    def recall(self) -> float:
        return len(self.hits) / len(self.truth) if self.truth else 1.0


def score(truth: set[int] | frozenset[int], found: set[int] | frozenset[int]) -> Score:
    return Score(frozenset(truth), frozenset(found))


def steps_in_ranges(ranges: list[tuple[int, int]]) -> set[int]:
    return {s for first, last in ranges for s in range(first, last + 1)}


# --- fleet scoring: incidents against the fault catalogue's ground truth ---------------------

GRACE_BEFORE_STEPS = 2  # a hang is noticed at the last step that completed, just before onset
GRACE_AFTER_STEPS = 10  # an incident this soon after the fault ended still describes it

SCOPE_EQUIVALENT: dict[str, tuple[str, ...]] = {
    "rank": ("rank", "device"), "host": ("host",), "group": ("group", "domain"), "link": ("link",),
    "stage": ("stage",), "job": ("job",),
}


@dataclass(frozen=True, slots=True)
class IncidentView:
    """One incident as the scorer sees it: its first state (for delay) and its latest (for scope)."""

    incident_id: str
    job: str
    rules: frozenset[str]
    scope: str
    ranks: frozenset[int]
    host: str | None
    domain: str | None
    group: int | None
    link: str | None
    stage: int | None
    step_first: int | None
    step_last: int | None
    first_step_last: int | None  # step_last when it opened: the step at which it was detected
    first_detected_ns: int
    attempt: int = 0  # the job's launch (contract 1.4): a relaunch re-runs step numbers


def latest_incidents(messages: list[dict[str, Any]]) -> list[IncidentView]:
    """Reduce alert messages (any order of open/update/resolved) to one view per incident_id."""
    first: dict[str, dict[str, Any]] = {}
    last: dict[str, dict[str, Any]] = {}
    for m in sorted(messages, key=lambda m: int(m.get("detected_ns") or 0)):
        iid = str(m["incident_id"])
        first.setdefault(iid, m)
        last[iid] = m
    out = []
    for iid, m in last.items():
        f = first[iid]
        rules = {str(m["rule"]), *(str(r) for r in m.get("rules") or [])}
        out.append(IncidentView(
            incident_id=iid, job=str(m["job"]), rules=frozenset(rules), scope=str(m.get("scope") or "job"),
            ranks=frozenset(int(r) for r in m.get("ranks") or []), host=m.get("host"), domain=m.get("domain"),
            group=m.get("group"), link=m.get("link"), stage=m.get("stage"), step_first=m.get("step_first"),
            step_last=m.get("step_last"), first_step_last=f.get("step_last", f.get("step_first")),
            first_detected_ns=int(f.get("detected_ns") or 0), attempt=int(m.get("attempt") or 0)))
    return out


def _window(fault: dict[str, Any], total_steps: int) -> tuple[int, int]:
    end = fault.get("end_step")
    end = total_steps - 1 if end is None else int(end)
    return int(fault["start_step"]) - GRACE_BEFORE_STEPS, end + GRACE_AFTER_STEPS


def _in_time(inc: IncidentView, fault: dict[str, Any], total_steps: int) -> bool:
    lo, hi = _window(fault, total_steps)
    first = inc.step_first if inc.step_first is not None else inc.first_step_last
    last = inc.step_last if inc.step_last is not None else first
    if first is None or last is None:
        return True  # no step range: judged by place only
    return int(first) <= hi and int(last) >= lo


def _touches(inc: IncidentView, fault: dict[str, Any]) -> bool:
    if inc.scope == "job" or fault["scope"] == "job" or fault.get("fleet"):  # a fleet's incident: its fault's
        return True
    ranks = set(fault.get("ranks") or [])
    return bool(inc.ranks & ranks) or (inc.host is not None and inc.host in (fault.get("hosts") or [])) or (
        inc.link is not None and _names_link(inc, fault)) or (
        inc.stage is not None and inc.stage == fault.get("stage"))


def _names_link(inc: IncidentView, fault: dict[str, Any]) -> bool:
    """The incident names one of the fault's links: exactly ("node-3/rdma"), by a link name that
    mentions a faulty host as a whole token ("node-3->node-5", "node-3:eth1"), or by the host."""
    links = fault.get("links") or []
    if inc.link is not None:
        if inc.link in links:
            return True
        return any(re.search(rf"(?<![\w-]){re.escape(h)}(?![\w])", inc.link) for h in fault.get("hosts") or [])
    return inc.host is not None and f"{inc.host}/rdma" in links


def localised(inc: IncidentView, fault: dict[str, Any]) -> bool:
    """Right scope type and right members: one host incident for a slow host, not eight rank ones. A fault
    scored at the job's scope that still has a culprit (a rank died, the job was killed before its peers
    could tell) is localised too by an incident naming exactly that culprit: narrower, and right."""
    scope = str(fault["scope"])
    if fault.get("fleet"):  # a fleet-wide drift: on its link class (`links`) or the device kind
        return inc.scope == scope and (scope != "link" or inc.link in (fault.get("links") or []))
    if scope == "job" and inc.scope != "job" and (fault.get("ranks") or fault.get("hosts")):
        return (bool(inc.ranks) and inc.ranks == frozenset(fault.get("ranks") or [])) or (
            inc.scope == "host" and inc.host in (fault.get("hosts") or []))
    if inc.scope not in SCOPE_EQUIVALENT.get(scope, (scope,)):
        return False
    if scope == "rank":
        return inc.ranks == frozenset(fault.get("ranks") or [])
    if scope == "host":
        return inc.host in (fault.get("hosts") or []) or (
            bool(inc.ranks) and inc.ranks == frozenset(fault.get("ranks") or []))
    if scope == "group":
        return inc.domain == fault.get("domain") and inc.group == fault.get("group")
    if scope == "link":
        return _names_link(inc, fault)
    if scope == "stage":
        return inc.stage == fault.get("stage")
    return True


@dataclass(frozen=True, slots=True)
class RunTruth:
    """One simulated run as the scorer needs it."""

    job: str
    faults: list[dict[str, Any]]  # ground-truth lines
    total_steps: int
    rank_steps: int
    onset_ns: dict[int, int] = field(default_factory=dict)  # fault index -> wall-clock ns of its start step
    paced: bool = False


@dataclass(slots=True)
class FaultOutcome:
    detected: bool
    localised: bool
    rule_attribution: float
    incidents: int
    delay_steps: float | None
    delay_s: float | None
    lead_steps: float | None = None  # a forecast fault (`oom_step` in its magnitude): steps from detection to it


@dataclass(slots=True)
class RunScore:
    faults: list[FaultOutcome]
    incidents: int
    matched_incidents: int
    false_alarms: int
    rank_steps: int


def score_run(truth: RunTruth, incidents: list[IncidentView]) -> RunScore:
    """Match one run's incidents to its faults (pure)."""
    mine = [i for i in incidents if i.job == truth.job]
    matched: set[str] = set()
    outcomes = []
    for n, fault in enumerate(truth.faults):
        if not fault.get("rules"):
            continue  # an event of the run no detector should report (a quick restart): never a fault to find
        hits = [i for i in mine if i.attempt == int(fault.get("attempt") or 0) and _in_time(i, fault, truth.total_steps)
                and _touches(i, fault)]
        matched.update(i.incident_id for i in hits)
        expected = set(fault.get("rules") or [])
        found_rules = set().union(*(i.rules for i in hits)) if hits else set()
        delay_steps = delay_s = lead_steps = None
        if hits and not fault.get("fleet"):  # a fleet incident's steps are the fleet's judgements: no delay in steps
            first = min(hits, key=lambda i: i.first_detected_ns)
            step_at = first.first_step_last if first.first_step_last is not None else fault["start_step"]
            delay_steps = float(max(0, int(step_at) - int(fault["start_step"])))
            if "oom_step" in (fault.get("magnitude") or {}):  # a forecast: how far ahead of the crash it came
                lead_steps = float(fault["magnitude"]["oom_step"]) - int(step_at)
            if truth.paced and n in truth.onset_ns:
                delay_s = max(0.0, (first.first_detected_ns - truth.onset_ns[n]) / 1e9)
        outcomes.append(FaultOutcome(
            detected=bool(hits), localised=any(localised(i, fault) for i in hits),
            rule_attribution=len(expected & found_rules) / len(expected) if expected else 1.0,
            incidents=len(hits), delay_steps=delay_steps, delay_s=delay_s, lead_steps=lead_steps))
    return RunScore(faults=outcomes, incidents=len(mine), matched_incidents=len(matched),
                    false_alarms=len(mine) - len(matched), rank_steps=truth.rank_steps)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarise(runs: list[RunScore]) -> dict[str, Any]:
    """One scenario's figures over its runs (RESULTS.md keys for detection.json)."""
    faults = [f for r in runs for f in r.faults]
    detected = [f for f in faults if f.detected]
    incidents = sum(r.incidents for r in runs)
    delays = [f.delay_steps for f in detected if f.delay_steps is not None]
    delays_s = [f.delay_s for f in detected if f.delay_s is not None]
    leads = [f.lead_steps for f in detected if f.lead_steps is not None]
    forecast = {"forecast_lead_steps_min": min(leads), "forecast_lead_steps_p50": _pct(leads, 50)} if leads else {}
    return {
        **forecast,
        "faults": len(faults),
        "recall": len(detected) / len(faults) if faults else None,
        "precision": (sum(r.matched_incidents for r in runs) / incidents if incidents else 0.0) if faults else None,
        "localisation": sum(f.localised for f in faults) / len(faults) if faults else None,
        "rule_attribution": sum(f.rule_attribution for f in detected) / len(faults) if faults else None,
        "incidents_per_fault": sum(f.incidents for f in detected) / len(detected) if detected else None,
        "delay_steps_p50": _pct(delays, 50), "delay_steps_p99": _pct(delays, 99),
        "delay_s_p50": _pct(delays_s, 50), "delay_s_p99": _pct(delays_s, 99),
        "incidents": incidents,
        "false_alarms": sum(r.false_alarms for r in runs),
        "rank_steps": sum(r.rank_steps for r in runs),
    }


def false_alarms_per_100k(healthy: list[RunScore]) -> float:
    rank_steps = sum(r.rank_steps for r in healthy)
    return 1e5 * sum(r.false_alarms for r in healthy) / rank_steps if rank_steps else 0.0


JOB_DAY_RANK_STEPS = 10_240 * 86_400  # a 10,240-rank job at 1 step/s for a day (issue #6: ~885 M rank-steps)


def poisson_upper_95(k: int) -> float:
    """One-sided 95 % upper bound on a Poisson mean after observing k events (k = 0: about 3, the rule of three)."""
    def cdf(mu: float) -> float:
        term = total = math.exp(-mu)
        for i in range(1, k + 1):
            term *= mu / i
            total += term
        return total
    lo, hi = float(k), float(k) + 10.0 + 10.0 * math.sqrt(k + 1)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > 0.05 else (lo, mid)
    return hi


def false_alarms_per_job_day(healthy: list[RunScore]) -> dict[str, float | None]:
    """False alarms scaled to one 10,240-rank job-day: observed, and the 95 % upper bound the sample allows.

    Zero false alarms in n rank-steps still allows up to 3/n per rank-step: the bound says how
    many healthy rank-steps a claim of "about one false alarm a day" needs.
    """
    rank_steps = sum(r.rank_steps for r in healthy)
    if not rank_steps:
        return {"observed": None, "upper_95": None}
    k = sum(r.false_alarms for r in healthy)
    return {"observed": JOB_DAY_RANK_STEPS * k / rank_steps,
            "upper_95": JOB_DAY_RANK_STEPS * poisson_upper_95(k) / rank_steps}

