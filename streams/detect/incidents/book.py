"""The incident book of one job: findings in, Incident and ControlCommand events out.

- Findings with the same (family, key) are one problem: every rule that fires on that
  scope joins the incident (`rules`), its step range grows, its peak evidence is kept: the
  peak among the steps whose cause (`cause_phase`) is the one most of its steps name. The
  single worst step of a run is often a planned one (a checkpoint inside a slow period), whose
  own cause would otherwise become the whole incident's.
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
- Hold-down (hysteresis against fragmentation): a resolved incident is held for
  `hold_down_steps` steps. A finding of the same problem (same family and key) in that time
  re-opens the SAME incident (same id, an `update` carrying `evidence.reopened`) once it
  passes the usual persistence, instead of opening a second one. Typical cases: a slow step
  resolved as a new baseline after `shift_steps` while the kernel rules, whose history has
  only just formed, begin to fire on the same job; a fault that comes and goes (unstable
  power, timing conflicts) resolving between bursts. An incident resolved as a permanent
  shift (`resolve_now`: the slow steps became the new baseline) is held for
  `shift_hold_steps` (the baseline's length): until the new baseline has replaced the old
  one, the job changing back (the change reverted, the fault ended) is the end of the same
  episode, not a new problem. An incident of one culprit (a rank, host, link, group or PP
  stage) is held `culprit_hold_down_steps`: a rank slow in bursts (5 steps every 25), a link
  that flaps, is one incident that records each burst (`evidence.bursts`, `burst_<n>_step`),
  not one per burst; so is an incident of any scope that already came back once (a recurring
  problem: a GC storm's quiet spells). A host incident's absorbed ranks are not held (the host
  carries them). A job's GC storm incident continues the rank incident its first pause opened.
  Periodic work slower than its own past (`evidence.rhythm_period`, scopes/rhythm.py) is held two
  periods: the next slow checkpoint is the same problem.
- A host incident opening continues an incident of one of its ranks (open, or resolved as
  absorbed or recently, i.e. held) rather than adding one: a host fault often shows on its worst
  rank first (a foreign process: Hermes' rank 3) before half the host's ranks are flagged.
- Adoption: a culprit found a few steps after the job's slow steps opened their own job-wide
  incident (a slow PP stage or DP group needs more steps to show than the step time) takes
  that incident over when it opens (`Finding.adopts`): same id, an `update` with the
  culprit's scope and every rule of both, instead of a second incident for one fault. So does
  a split group opening a step or three after a device incident (R1/R2) of its own members.
- Opening a rank or host incident sends one `profile_on` for the culprit ranks
  (coarse-to-fine); ids are deterministic, so a replay after a restart re-sends the SAME
  ids, never a second incident or command.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from schemas import ControlCommand, Incident
from streams.detect.scopes.finding import Finding

Output = Incident | ControlCommand
MAX_TEXT = 300      # summaries copied into alerts are capped
UPDATE_EVERY = 20   # an open incident sends an update at most every this many flagged steps
PROFILE_SCOPES = ("rank", "host")
CULPRIT_SCOPES = ("rank", "host", "link", "group", "stage")  # held `culprit_hold_down_steps` once resolved
MAX_BURSTS = 16
STORM_ADOPT_STEPS = 60  # a GC rank incident begun this soon before a job's GC storm incident is its start
#                        (join's GC_STORM_MEMORY: a sparse storm's pauses can be 20 steps apart)
GROUP_ADOPT_STEPS = 3  # a device incident of a split group's members begun this soon before it is the group's
JOB_RANKS_LISTED = 64  # ranks a job-scope incident names (the ranks a storm hit); its evidence counts the rest


def _cap(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 1] + "…"


def _observed(track: Track, seen: npt.NDArray[np.bool_] | None) -> bool:
    ranks = track.finding.ranks
    if seen is None or not ranks:
        return True
    return all(0 <= r < seen.size and bool(seen[r]) for r in ranks)


# A rule whose finding says what the named (rule, metric) findings say, better: joining their incident, its
# words (summary, cause, suggestion) become the incident's. The OOM forecast names the consequence of a
# device's memory (T6) drifting or past its bound.
NAMES_BETTER: dict[str, frozenset[tuple[str, str | None]]] = {"OOM": frozenset({("R1", "T6"), ("R2", "T6")})}

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
    resolved_at: int | None = None  # the step it was last resolved at (a held incident re-opening)
    hold: int = 0                   # ... and for how many steps it stays held
    bursts: list[int] = field(default_factory=list)  # the first step of each re-opening (a culprit that comes and goes)
    revived_at: int | None = None   # the step a held incident came back as a candidate
    causes: dict[str, int] = field(default_factory=dict)  # lead rule's cause_phase -> flagged steps naming it
    best: dict[str, Finding] = field(default_factory=dict)  # lead rule's cause_phase ("": none) -> its peak finding


def _bursts(track: Track) -> dict[str, float]:
    """An incident that came back records each episode: how many, and where the re-openings began
    (the first `MAX_BURSTS` of them; its own first step is `step_first`)."""
    if not track.bursts:
        return {}
    out = {"bursts": float(len(track.bursts) + 1)}
    out.update((f"burst_{n}_step", float(s)) for n, s in enumerate(track.bursts[:MAX_BURSTS - 1], start=2))
    return out


def _reported(track: Track) -> Finding | None:
    """The finding the incident should now report, when it is not the one it reports: the peak
    (`best`) among the steps of the cause most of its steps name (`causes`); None to keep the
    current one. It changes when the leading cause changes, or the lead's peak grows past
    `track.peak`."""
    lead = max(track.causes, key=lambda c: track.causes[c]) if track.causes else ""
    chosen = track.best.get(lead) or track.best.get("")
    if chosen is None or chosen is track.finding:
        return None
    if track.peak is None or chosen.cause_phase != track.finding.cause_phase:
        return chosen
    return chosen if chosen.observed is not None and chosen.observed > track.peak else None


@dataclass(slots=True)
class IncidentBook:
    job: str
    profile_steps: int = 5
    hold_down_steps: int = 10
    shift_hold_steps: int = 50
    culprit_hold_down_steps: int = 50
    tracks: dict[str, Track] = field(default_factory=dict)
    held: dict[str, Track] = field(default_factory=dict)  # resolved incidents that may still re-open
    commands_sent: list[str] = field(default_factory=list)
    opened_total: int = 0
    attempt: int = 0  # the job's launch (contract 1.4): a relaunch's incidents get ids of their own

    def observe(self, step: int, findings: list[Finding], now_ns: int,
                seen: npt.NDArray[np.bool_] | None = None) -> list[Output]:
        """All findings of one released step (every scope and rule), then the step's bookkeeping.

        `seen`: which ranks reported this step (None: all of them).
        """
        out: list[Output] = []
        for tid in [t for t, tr in self.held.items() if step - (tr.resolved_at or 0) > tr.hold]:
            del self.held[tid]
        open_hosts = [t for t in self.tracks.values()  # a host candidate absorbs nothing until it opens
                      if t.opened and t.finding.scope == "host" and t.finding.host]
        host_of = {r: t.finding.host for t in open_hosts for r in t.finding.ranks}  # a rank finding may not
        hosts = {t.finding.host for t in open_hosts}                                  # name its host
        # a rank of a host whose incident is held (resolved within hold-down) re-opens the host's
        # incident rather than one of its own: unstable power comes in bursts, and a burst's first
        # finding is often one device's R1/R2 (open at once), a step before the host's slow steps
        held_host_of = {r: t.finding.host for t in self.held.values() if t.finding.scope == "host"
                        and t.finding.host and t.finding.family == "perf" and t.finding.host not in hosts
                        for r in t.finding.ranks}
        touched: set[str] = set()
        for f in sorted(findings, key=lambda f: f.scope != "host"):
            if f.scope == "rank" and f.family == "perf":
                host = f.host if f.host in hosts else host_of.get(f.ranks[0]) if f.ranks else None
                held = held_host_of.get(f.ranks[0]) if host is None and f.ranks else None
                if held is not None and all(held_host_of.get(r) == held for r in f.ranks):
                    host = held
                if host is not None:  # absorbed by its host's incident: its evidence keeps that one open
                    f.key, f.scope, f.host = f"host:{host}", "host", host
            late = self._held_by_then(f, step)
            if late is not None:  # evidence from before an incident of its ranks resolved: that incident's
                self._merge(late, f)
                continue
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
                since = getattr(f, "since_step", None)  # a finding snapshotted before the field existed has none
                track = self.tracks[tid] = self._revive(tid, f, step) or Track(
                    finding=f, first=min(step, since) if since is not None else step, last=step, rules=[f.rule],
                    peak=f.observed,
                    causes={f.cause_phase: 1} if f.cause_phase else {}, best={f.cause_phase or "": f})
            else:
                new_rule = f.rule not in track.rules
                track.flagged += 1
                track.clean = 0
                track.last = step
                self._merge(track, f)
                if new_rule and track.opened:
                    track.since_update = UPDATE_EVERY  # a rule joining is news: update now
            if not track.opened and track.flagged >= f.open_after:
                sibling = self._rank_sibling(track)
                if sibling is not None:  # a second rank of a host with a rank incident: the host's problem
                    tid = self._as_host(tid, track)
                    touched.add(tid)
                out.extend(self._open(tid, track, now_ns))
                if track.finding.scope == "host":
                    out.extend(self._absorb(track.finding.host, step, now_ns))
                    hosts.add(track.finding.host)
                    host_of.update((r, track.finding.host) for r in track.finding.ranks)
            elif track.opened:
                track.since_update += 1
                if f.evidence.get("resolve_now"):
                    out.append(self._resolve(tid, track, step, now_ns, max(self.hold_down_steps,
                                                                           self.shift_hold_steps)))
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
                    if track.incident_id:
                        self.held[tid] = track  # a re-fire that did not persist: still held (from its resolve)
            elif track.clean >= track.finding.resolve_after:
                # a culprit, or a problem that came back once already (a storm, a rhythm of faults): it may
                # come back again after a long quiet spell and still be the same problem
                culprit = (track.finding.scope in CULPRIT_SCOPES or bool(track.bursts)
                           or "gc_ranks_recent" in track.finding.evidence)  # a storm: pauses come and go
                # periodic work slower than its past comes back with its rhythm: held past the next episode
                period = int(track.finding.evidence.get("rhythm_period", 0))
                out.append(self._resolve(tid, track, step, now_ns, max(
                    self.hold_down_steps, self.culprit_hold_down_steps if culprit else 0, 2 * period)))
        return out

    def finish(self, now_ns: int, attempt_ended: bool = False) -> list[Output]:
        """The job ended (or, `attempt_ended`, a relaunch replaced this attempt): every open incident
        is resolved, candidates are dropped. An attempt's incidents say so (`evidence.attempt_ended`)."""
        if attempt_ended:
            for t in self.tracks.values():
                t.finding.evidence["attempt_ended"] = float(self.attempt)
        out: list[Output] = [self._event(t, "resolved", now_ns) for t in self.tracks.values() if t.opened]
        self.tracks.clear()
        self.held.clear()
        return out

    def stopped(self, step: int, f: Finding, now_ns: int) -> list[Output]:
        """The job stopped (`f`: JOB_STOPPED). A hang that stopped it first (HUNG_HOST or HUNG_RANK, open or
        held) is the same problem: the stop joins that incident (its rules gain JOB_STOPPED), the host or
        rank it names is the one that stopped first. Every other open incident is resolved: the job is not
        running, and a host blocked in its collective when the job was killed is no problem of its own."""
        hangs = sorted((t for t in (*self.tracks.values(), *self.held.values())
                        if t.finding.family == "hang" and t.finding.rule in ("HUNG_HOST", "HUNG_RANK")
                        and t.incident_id), key=lambda t: (t.first, t.finding.key))
        if hangs:
            first = hangs[0].finding
            f.key, f.scope, f.ranks, f.host = first.key, first.scope, list(first.ranks), first.host
            f.evidence = {**f.evidence, "stopped_after_hang": 1.0}
        out = self.observe(step, [f], now_ns, np.zeros(0, dtype=bool))
        keep = f"{f.family}:{f.key}"
        for tid in [t for t, tr in self.tracks.items() if tr.opened and t != keep]:
            track = self.tracks[tid]
            track.finding.evidence["job_stopped"] = 1.0
            out.append(self._resolve(tid, track, step, now_ns, 0))
        return out

    def open_incidents(self) -> int:
        return sum(1 for t in self.tracks.values() if t.opened)

    def _resolve(self, tid: str, track: Track, step: int, now_ns: int, hold: int) -> Incident:
        """Resolve an open incident and hold it for `hold` steps (it may re-open)."""
        del self.tracks[tid]
        track.resolved_at, track.hold = step, hold
        if hold > 0 and self.hold_down_steps > 0:
            self.held[tid] = track
        return self._event(track, "resolved", now_ns)

    def _held_by_then(self, f: Finding, step: int) -> Track | None:
        """The held (resolved) incident that a late finding belongs to: the finding is dated before this step
        (`since_step`: samples released late), no later than that incident's resolution, of the same family,
        and names only ranks the incident names. None: the finding is judged as any other."""
        since = getattr(f, "since_step", None)
        if since is None or since >= step or not f.ranks:
            return None
        for track in self.held.values():
            if (track.finding.family == f.family and track.resolved_at is not None and since <= track.resolved_at
                    and set(f.ranks) <= set(track.finding.ranks)):
                return track
        return None

    def _revive(self, tid: str, f: Finding, step: int) -> Track | None:
        """The held incident of this problem, back as a candidate (None: nothing held)."""
        track = self.held.pop(tid, None)
        if track is None:
            return None
        track.opened, track.flagged, track.clean, track.since_update, track.last = False, 1, 0, 0, step
        track.revived_at = step
        self._merge(track, f)
        return track

    def _adopt(self, tid: str, track: Track, adopted: Track, now_ns: int) -> list[Output]:
        """The culprit's candidate takes over an open incident: its id and steps, the culprit's scope."""
        old = f"{adopted.finding.family}:{adopted.finding.key}"
        if self.tracks.get(old) is adopted:
            del self.tracks[old]
        else:
            self.held.pop(old, None)
        rules = track.rules + [r for r in adopted.rules if r not in track.rules]
        evidence = {**adopted.finding.evidence, **track.finding.evidence, "adopted": 1.0}
        evidence.pop("resolve_now", None)  # the job's shift ended its own incident, never the culprit's
        track.finding.evidence = evidence
        track.finding.adopts = None
        track.rules = rules
        track.first = min(track.first, adopted.first)
        track.incident_id = adopted.incident_id
        track.opened = True
        track.since_update = 0
        self.tracks[tid] = track
        return [self._event(track, "update", now_ns), *self._profile(track, f"{track.incident_id}@{tid}", now_ns)]

    def _merge(self, track: Track, f: Finding) -> None:
        if f.rule not in track.rules:
            track.rules.append(f.rule)
        for r in f.ranks:
            if track.finding.scope == "job" and len(track.finding.ranks) >= JOB_RANKS_LISTED:
                break  # a job-wide problem's ranks (a GC storm's) are named up to this many
            if r not in track.finding.ranks:
                track.finding.ranks.append(r)
        same_rule = f.rule == track.finding.rule
        adopts = None if track.opened else track.finding.adopts or f.adopts  # sticky until it opens
        if same_rule and f.cause_phase:
            track.causes[f.cause_phase] = track.causes.get(f.cause_phase, 0) + 1
        if same_rule and f.observed is not None:
            best = track.best.get(f.cause_phase or "")
            if best is None or best.observed is None or f.observed > best.observed:
                track.best[f.cause_phase or ""] = f
            chosen = _reported(track)
            if chosen is not None:
                cur = track.finding  # the scope stays (a rank candidate re-keyed as its host's keeps the host)
                track.peak = chosen.observed
                track.finding = replace(chosen, key=cur.key, scope=cur.scope, ranks=cur.ranks, host=cur.host,
                                        device=cur.device, domain=cur.domain, group=cur.group, link=cur.link,
                                        stage=cur.stage, family=cur.family, evidence=dict(chosen.evidence))
        if not same_rule and (track.finding.rule, track.finding.metric) in NAMES_BETTER.get(f.rule, ()):
            # the same problem, said better: a device's memory drifting (R2 on T6) is what the OOM forecast
            # names with its consequence and remedy (a leak, or fragmentation): the incident takes its words
            cur = track.finding
            track.finding = replace(f, key=cur.key, scope=cur.scope, ranks=cur.ranks, host=cur.host or f.host,
                                    device=cur.device if cur.device is not None else f.device, family=cur.family,
                                    evidence={**cur.evidence, **f.evidence}, open_after=cur.open_after)
        track.finding.adopts = adopts
        track.finding.evidence.update({k: v for k, v in f.evidence.items() if k not in track.finding.evidence})

    def _absorb(self, host: str | None, step: int, now_ns: int) -> list[Output]:
        out: list[Output] = []
        for tid in [t for t, tr in self.tracks.items()
                    if tr.finding.scope == "rank" and tr.finding.host == host and tr.finding.family == "perf"]:
            track = self.tracks.pop(tid)
            if track.opened:
                track.finding.evidence["absorbed_by_host"] = 1.0
                out.append(self._event(track, "resolved", now_ns))
                track.resolved_at = step
            if track.incident_id:  # open, or a held one re-firing: the host's incident may take it over
                track.hold = self.hold_down_steps
                self.held[tid] = track
        return out

    def _rank_sibling(self, track: Track) -> Track | None:
        """Another rank's incident (open, or held) on the host of this rank candidate about to open."""
        f = track.finding
        if f.scope != "rank" or f.host is None:
            return None
        return next((t for t in (*self.tracks.values(), *self.held.values())
                     if t is not track and t.incident_id and t.finding.scope == "rank" and t.finding.host == f.host
                     and t.finding.family == f.family and not set(t.finding.ranks) & set(f.ranks)), None)

    def _as_host(self, tid: str, track: Track) -> str:
        """A rank candidate re-keyed as its host's: ranks of one host slowing one after the other (a foreign
        process on the node: its worst rank first, then another) are one host problem, not one incident per
        rank; opening, it continues the first rank's incident (`_host_adoptee`) and absorbs the others."""
        f = track.finding
        host_tid = f"{f.family}:host:{f.host}"
        self.tracks.pop(tid, None)
        candidate = self.tracks.pop(host_tid, None)  # the host's own finding, not yet persistent
        ranks = sorted({r for t in (*self.tracks.values(), *self.held.values()) if t.finding.scope == "rank"
                        and t.finding.host == f.host for r in t.finding.ranks} | set(f.ranks))
        f.key, f.scope, f.ranks = f"host:{f.host}", "host", ranks
        f.summary = f"host {f.host}: ranks {', '.join(map(str, ranks))} slow one after the other; {f.summary}"
        f.evidence["ranks_slowed"] = float(len(ranks))
        if candidate is not None:
            track.rules += [r for r in candidate.rules if r not in track.rules]
            track.first = min(track.first, candidate.first)
        self.tracks[host_tid] = track
        return host_tid

    def _adoptee(self, f: Finding) -> Track | None:
        """The job incident a culprit adopts (`Finding.adopts`): open, or resolved since it was marked
        (held, or back as a candidate). A shift resolves the job's slow-step incident once the slow
        steps become its baseline; a group's bandwidth rule may open a step or two after that, and it
        is still the cause of those slow steps, not a second problem."""
        if not f.adopts:
            return None
        tid = f"{f.family}:{f.adopts}"
        for adopted in (self.tracks.get(tid), self.held.get(tid)):
            if adopted is not None and (adopted.opened or adopted.incident_id):
                return adopted
        return None

    def _storm_adoptee(self, f: Finding, first: int) -> Track | None:
        """The rank incident that a GC storm's first pause opened (open, or resolved and held) before a second
        rank's pause showed the storm was the job's: the job's storm incident continues it (same id). Only one
        that began within `STORM_ADOPT_STEPS` of the storm's incident and names GC as its cause."""
        if f.scope != "job" or "gc_ranks_recent" not in f.evidence:
            return None
        ranks = [t for t in (*self.tracks.values(), *self.held.values())
                 if t.finding.scope == "rank" and t.finding.family == f.family and t.incident_id
                 and t.finding.cause_phase == "gc_ms" and first - STORM_ADOPT_STEPS <= t.first <= first]
        return min(ranks, key=lambda t: (t.first, t.finding.key)) if ranks else None

    def _group_adoptee(self, f: Finding, first: int) -> Track | None:
        """A device incident (R1/R2 of a rank or host) of members of a split group opening now, begun at most
        `GROUP_ADOPT_STEPS` before the group's first step: the group's cold members idle (their AI Core, power),
        or its hot ones hot. Device samples run ahead of the steps in a backlog, so their incident can open a
        step or two before the split is flagged (moe_imbalance through Kafka: an R1 of the cold experts'
        devices opened beside the EP group's incident). The group's incident continues it (same id)."""
        if f.rule != "SLOW_GROUP" or f.scope != "group" or not f.ranks:
            return None
        members = set(f.ranks)
        devices = [t for t in (*self.tracks.values(), *self.held.values())
                   if t.incident_id and t.finding.family == f.family and t.finding.scope in ("rank", "host")
                   and t.finding.rule in ("R1", "R2") and t.finding.ranks and set(t.finding.ranks) <= members
                   and first - GROUP_ADOPT_STEPS <= t.first <= first]
        return min(devices, key=lambda t: (t.first, t.finding.key)) if devices else None

    def _host_adoptee(self, f: Finding) -> Track | None:
        """A rank incident of this host, open or held, that the opening host incident continues:
        the one the slow steps joined, else the earliest (the others stay resolved as absorbed)."""
        ranks = [t for t in (*self.tracks.values(), *self.held.values())
                 if t.finding.scope == "rank" and t.finding.host == f.host and t.finding.family == f.family
                 and t.incident_id]
        if f.scope != "host" or not ranks:
            return None
        return min(ranks, key=lambda t: ("SLOW_STEP" not in t.rules, t.first))

    def _open(self, tid: str, track: Track, now_ns: int) -> list[Output]:
        f = track.finding
        adopted = (self._adoptee(f) or self._host_adoptee(f) or self._storm_adoptee(f, track.first)
                   or self._group_adoptee(f, track.first))
        if adopted is not None and adopted is not track and not track.incident_id:
            return self._adopt(tid, track, adopted, now_ns)
        track.opened = True
        if track.incident_id:  # a held incident re-opens: same id, an update, no second profile command
            track.finding.evidence["reopened"] = float(track.finding.evidence.get("reopened", 0.0)) + 1.0
            track.bursts.append(track.revived_at if track.revived_at is not None else track.last)
            return [self._event(track, "update", now_ns)]
        attempt = f":a{self.attempt}" if self.attempt else ""  # attempt 0: the ids of 1.3 producers' jobs
        track.incident_id = f"{f.rule}:{self.job}:{f.key}:s{track.first}{attempt}"
        self.opened_total += 1
        return [self._event(track, "open", now_ns), *self._profile(track, track.incident_id, now_ns)]

    def _profile(self, track: Track, name: str, now_ns: int) -> list[Output]:
        """One `profile_on` for a rank or host incident's culprit ranks (deterministic id: sent once)."""
        f = track.finding
        command_id = f"profile:{name}"
        if f.scope not in PROFILE_SCOPES or not f.ranks or command_id in self.commands_sent:
            return []
        self.commands_sent.append(command_id)
        del self.commands_sent[:-1000]
        return [ControlCommand(
            command_id=command_id, job=self.job, action="profile_on", ranks=sorted(f.ranks),
            step_first=track.last + 1, step_count=self.profile_steps, issued_ns=now_ns,
            reason=_cap(f"{f.rule}: {f.summary}") or "", incident_id=track.incident_id)]

    def _event(self, track: Track, state: str, now_ns: int) -> Incident:
        f = track.finding
        steps = f"step {track.first}" if track.first == track.last else f"steps {track.first}–{track.last}"
        return Incident(
            incident_id=track.incident_id, job=self.job, rule=track.rules[0], state=state,  # type: ignore[arg-type]
            severity=f.severity, scope=f.scope, summary=_cap(f"{f.summary}; {steps}") or "", detected_ns=now_ns,
            metric=f.metric, domain=f.domain, group=f.group, ranks=sorted(f.ranks), host=f.host, device=f.device,
            step_first=track.first, step_last=track.last, observed=track.peak, expected=f.expected,
            threshold=f.threshold, unit=f.unit, evidence={**f.evidence, **_bursts(track)}, cause=_cap(f.cause),
            suggestion=_cap(f.suggestion), rules=list(track.rules), link=f.link, stage=f.stage,
            attempt=self.attempt,
        )
