"""The incident book of one job: findings in, Incident and ControlCommand events out.

- Findings with the same (family, key) are one problem: every rule that fires on that
  scope joins the incident (`rules`), its step range grows, its peak evidence is kept.
- An incident opens after `open_after` CONSECUTIVE flagged steps (persistence against noise:
  noise that passes a 3-sigma test once in a thousand steps passes it three steps running
  once in a billion; a finding may allow `candidate_gap` clean steps between flagged ones) and
  resolves after `resolve_after` clean steps, or when its job ends.
- A host incident absorbs its ranks' incidents: open rank incidents of that host are
  resolved as absorbed, and the host's ranks raise no new rank incidents while it is open.
- A step that did not observe an incident's ranks (a frame released incomplete while a
  backlog of one input partition runs ahead of another, or a rank's report lost) is no
  evidence either way: it neither flags nor cleans the incident. Counting it as clean
  resolved an open incident during a catch-up and opened a second one for the same fault
  right after (measured in `make chaos`).
- Opening a rank or host incident sends one `profile_on` for the culprit ranks
  (coarse-to-fine); ids are deterministic, so a replay after a restart re-sends the SAME
  ids, never a second incident or command.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from schemas import ControlCommand, Incident
from streams.scopes.finding import Finding

Output = Incident | ControlCommand
MAX_TEXT = 300      # summaries copied into alerts are capped
UPDATE_EVERY = 20   # an open incident sends an update at most every this many flagged steps
PROFILE_SCOPES = ("rank", "host")


def _cap(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 1] + "…"


def _observed(track: Track, seen: npt.NDArray[np.bool_] | None) -> bool:
    ranks = track.finding.ranks
    if seen is None or not ranks:
        return True
    return all(0 <= r < seen.size and bool(seen[r]) for r in ranks)


@dataclass(slots=True)
class Track:
    """A candidate (not yet open) or open incident."""

    finding: Finding
    first: int
    last: int
    rules: list[str]
    flagged: int = 1
    clean: int = 0
    opened: bool = False
    incident_id: str = ""
    since_update: int = 0
    peak: float | None = None


@dataclass(slots=True)
class IncidentBook:
    job: str
    profile_steps: int = 5
    tracks: dict[str, Track] = field(default_factory=dict)
    commands_sent: list[str] = field(default_factory=list)
    opened_total: int = 0

    def observe(self, step: int, findings: list[Finding], now_ns: int,
                seen: npt.NDArray[np.bool_] | None = None) -> list[Output]:
        """All findings of one released step (every scope and rule), then the step's bookkeeping.

        `seen`: which ranks reported this step (None: all of them).
        """
        out: list[Output] = []
        hosts = {f.host for f in findings if f.scope == "host" and f.host}
        hosts |= {t.finding.host for t in self.tracks.values()
                  if t.opened and t.finding.scope == "host" and t.finding.host}
        touched: set[str] = set()
        for f in sorted(findings, key=lambda f: f.scope != "host"):
            if f.scope == "rank" and f.host in hosts and f.family == "perf":
                continue  # absorbed by its host's incident
            tid = f"{f.family}:{f.key}"
            if tid in touched:
                track = self.tracks.get(tid)  # None: resolved a moment ago (a shift), nothing to join
                if track is None:
                    continue
                self._merge(track, f)
                if not track.opened and track.flagged >= f.open_after:
                    out.extend(self._open(tid, track, now_ns))  # a rule with less persistence needed opens it
                continue
            touched.add(tid)
            track = self.tracks.get(tid)
            if track is None:
                track = self.tracks[tid] = Track(finding=f, first=step, last=step, rules=[f.rule], peak=f.observed)
            else:
                new_rule = f.rule not in track.rules
                track.flagged += 1
                track.clean = 0
                track.last = step
                self._merge(track, f)
                if new_rule and track.opened:
                    track.since_update = UPDATE_EVERY  # a rule joining is news: update now
            if f.scope == "host":
                out.extend(self._absorb(f.host, now_ns))
            if not track.opened and track.flagged >= f.open_after:
                out.extend(self._open(tid, track, now_ns))
            elif track.opened:
                track.since_update += 1
                if f.evidence.get("resolve_now"):
                    out.append(self._event(track, "resolved", now_ns))
                    del self.tracks[tid]
                elif track.since_update >= UPDATE_EVERY:
                    track.since_update = 0
                    out.append(self._event(track, "update", now_ns))
        for tid in [t for t in self.tracks if t not in touched]:
            track = self.tracks[tid]
            if not _observed(track, seen):
                continue  # no report from its ranks this step: neither flagged nor clean
            track.clean += 1
            if not track.opened:
                if track.clean > track.finding.candidate_gap:
                    del self.tracks[tid]  # persistence: flagged steps in a row (`candidate_gap` clean ones allowed)
            elif track.clean >= track.finding.resolve_after:
                if track.opened:
                    out.append(self._event(track, "resolved", now_ns))
                del self.tracks[tid]
        return out

    def finish(self, now_ns: int) -> list[Output]:
        """The job ended: every open incident is resolved, candidates are dropped."""
        out: list[Output] = [self._event(t, "resolved", now_ns) for t in self.tracks.values() if t.opened]
        self.tracks.clear()
        return out

    def open_incidents(self) -> int:
        return sum(1 for t in self.tracks.values() if t.opened)

    def _merge(self, track: Track, f: Finding) -> None:
        if f.rule not in track.rules:
            track.rules.append(f.rule)
        for r in f.ranks:
            if r not in track.finding.ranks:
                track.finding.ranks.append(r)
        same_rule = f.rule == track.finding.rule
        if same_rule and f.observed is not None and (track.peak is None or f.observed > track.peak):
            track.peak = f.observed
            ranks = track.finding.ranks
            track.finding = f
            track.finding.ranks = ranks
        track.finding.evidence.update({k: v for k, v in f.evidence.items() if k not in track.finding.evidence})

    def _absorb(self, host: str | None, now_ns: int) -> list[Output]:
        out: list[Output] = []
        for tid in [t for t, tr in self.tracks.items()
                    if tr.finding.scope == "rank" and tr.finding.host == host and tr.finding.family == "perf"]:
            track = self.tracks.pop(tid)
            if track.opened:
                track.finding.evidence["absorbed_by_host"] = 1.0
                out.append(self._event(track, "resolved", now_ns))
        return out

    def _open(self, tid: str, track: Track, now_ns: int) -> list[Output]:
        f = track.finding
        track.opened = True
        track.incident_id = f"{f.rule}:{self.job}:{f.key}:s{track.first}"
        self.opened_total += 1
        out: list[Output] = [self._event(track, "open", now_ns)]
        command_id = f"profile:{track.incident_id}"
        if f.scope in PROFILE_SCOPES and f.ranks and command_id not in self.commands_sent:
            self.commands_sent.append(command_id)
            del self.commands_sent[:-1000]
            out.append(ControlCommand(
                command_id=command_id, job=self.job, action="profile_on", ranks=sorted(f.ranks),
                step_first=track.last + 1, step_count=self.profile_steps, issued_ns=now_ns,
                reason=_cap(f"{f.rule}: {f.summary}") or "", incident_id=track.incident_id))
        return out

    def _event(self, track: Track, state: str, now_ns: int) -> Incident:
        f = track.finding
        steps = f"step {track.first}" if track.first == track.last else f"steps {track.first}–{track.last}"
        return Incident(
            incident_id=track.incident_id, job=self.job, rule=track.rules[0], state=state,  # type: ignore[arg-type]
            severity=f.severity, scope=f.scope, summary=_cap(f"{f.summary}; {steps}") or "", detected_ns=now_ns,
            metric=f.metric, domain=f.domain, group=f.group, ranks=sorted(f.ranks), host=f.host, device=f.device,
            step_first=track.first, step_last=track.last, observed=track.peak, expected=f.expected,
            threshold=f.threshold, unit=f.unit, evidence=dict(f.evidence), cause=_cap(f.cause),
            suggestion=_cap(f.suggestion), rules=list(track.rules), link=f.link, stage=f.stage,
        )
