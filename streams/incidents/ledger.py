"""The incident ledger: one incident per fault episode, across detect restarts.

A detector keeps its state in memory; after a crash it starts empty, re-detects a fault
that is still going on and names it anew, and never resolves what it opened before. The
ledger sits between any detection engine and the alerts topic and fixes that:

- every incident is keyed by (job, rule, scope) — the scope being the ranks, host, domain,
  group, device, link or stage it is about; at most one incident per key is open;
- a detector's `open` for a key that already has an open incident (e.g. one opened before
  the restart) becomes an `update` of that incident, under its id;
- an `open` whose steps lie inside an episode already resolved for that key is a replay of
  already-processed input (offsets not yet committed at the crash) and is dropped, with
  everything the detector later says about it;
- a control command for an incident is issued once per (incident, action);
- every incident still open when its job ends, or when its job sent nothing for `idle_ns`,
  is resolved by the ledger itself.

The ledger is rebuilt at start-up from the incidents and control topics (`restore`, fed by
streams/incidents/restore.py). It is a pure processor: outputs in, outputs out, time passed
in. Scope: one detect worker per app id (the ledger resolves idle jobs it does not own
otherwise); the changelog-backed engine replaces this with partitioned state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from schemas import ControlCommand, Incident

Output = Incident | ControlCommand
Key = tuple[str, str, str]  # job, rule, scope key

_SUPPRESSED = ""  # alias target of a replayed (already resolved) episode
ENDED_JOBS_KEPT_NS = 3600 * 10**9  # how long an ended job's entries stay to catch replays
# A restarted detector starts with empty windows: the first steps after a restart are often
# incomplete, so an ongoing fault may look like it stopped for a few steps and started again.
# An incident opened before the restart that the fresh detector resolved is re-opened (same id)
# when the same fault shows again within this many steps.
REOPEN_WITHIN_STEPS = 50
# The same holds for an incident the previous worker resolved shortly before it died (its own
# restart gap): if it was resolved less than this long before the restart, it counts as adopted.
REOPEN_WITHIN_NS = 60 * 10**9


def scope_key(incident: Incident) -> str:
    """What the incident is about, independent of when it was seen (a fault's identity)."""
    ranks = ",".join(str(r) for r in sorted(incident.ranks))
    parts = (incident.scope, ranks, incident.host or "", incident.domain or "",
             "" if incident.group is None else str(incident.group),
             "" if incident.device is None else str(incident.device), incident.link or "",
             "" if incident.stage is None else str(incident.stage))
    return "|".join(parts)


def ledger_key(incident: Incident) -> Key:
    return incident.job, incident.rule, scope_key(incident)


@dataclass(slots=True)
class _Entry:
    incident: Incident  # the last version published, under the canonical id
    resolved: bool
    adopted: bool = False  # opened before this worker started (restored from the alerts topic)


@dataclass(slots=True)
class LedgerStats:
    restored_incidents: int = 0
    restored_commands: int = 0
    merged_opens: int = 0       # a detector's open folded into an existing open incident
    reopened: int = 0           # a pre-restart incident the fresh detector resolved, seen again soon after
    replays_dropped: int = 0    # outputs about an episode that was already resolved
    commands_dropped: int = 0   # a command already issued for that incident
    resolved_on_end: int = 0
    resolved_idle: int = 0


class IncidentLedger:
    """Open incidents and issued commands per job; rewrites a detector's outputs (see module doc)."""

    def __init__(self, idle_ns: int) -> None:
        self.idle_ns = idle_ns
        self._entries: dict[Key, _Entry] = {}
        self._by_id: dict[str, Key] = {}
        self._alias: dict[str, dict[str, str]] = {}  # job -> detector's id -> canonical id ("" = suppressed)
        self._commands: dict[str, set[tuple[str, str]]] = {}  # job -> (canonical incident id, action)
        self._last_seen: dict[str, int] = {}  # job -> last input time
        self._ended: dict[str, int] = {}  # job -> when its end event arrived
        self._quiet: dict[str, int] = {}  # job -> when it was found idle (no input since)
        self.stats = LedgerStats()

    # --- start-up -----------------------------------------------------------------------------
    def restore(self, incidents: Iterable[Incident], commands: Iterable[ControlCommand], now_ns: int) -> None:
        """Replay the alerts and control topics (oldest first) into the ledger."""
        for incident in incidents:
            key = ledger_key(incident)
            resolved = incident.state == "resolved"
            recent = now_ns - incident.detected_ns <= REOPEN_WITHIN_NS
            self._entries[key] = _Entry(incident, resolved, adopted=not resolved or recent)
            self._by_id[incident.incident_id] = key
            self._last_seen[incident.job] = now_ns
            self.stats.restored_incidents += 1
        for command in commands:
            if command.incident_id is not None:
                self._commands.setdefault(command.job, set()).add((command.incident_id, command.action))
                self.stats.restored_commands += 1

    def open_incidents(self, job: str | None = None) -> list[Incident]:
        return [e.incident for k, e in self._entries.items() if not e.resolved and (job is None or k[0] == job)]

    def issued(self, job: str, incident_id: str, action: str) -> bool:
        return (incident_id, action) in self._commands.get(job, set())

    # --- the detector's outputs ---------------------------------------------------------------
    def touch(self, job: str, now_ns: int) -> None:
        """The job sent input at `now_ns` (keeps its incidents from idling out)."""
        self._last_seen[job] = now_ns
        self._quiet.pop(job, None)

    def reconcile(self, outputs: Sequence[Output], now_ns: int) -> list[Output]:
        """The outputs to publish instead of `outputs`: merged, de-duplicated, replays dropped."""
        out: list[Output] = []
        for item in outputs:
            fixed = self._incident(item, now_ns) if isinstance(item, Incident) else self._command(item)
            if fixed is not None:
                out.append(fixed)
        return out

    def _incident(self, incident: Incident, now_ns: int) -> Incident | None:
        self._last_seen[incident.job] = now_ns
        canonical = self._alias.get(incident.job, {}).get(incident.incident_id)
        if canonical == _SUPPRESSED:
            self.stats.replays_dropped += 1
            return None
        if canonical is None:
            canonical = self._first_sight(incident)
            if canonical is None:
                return None
        key = self._by_id.get(canonical)
        entry = self._entries.get(key) if key is not None else None
        if entry is None:  # a brand-new episode
            self._store(incident, canonical)
            return incident
        if entry.resolved:  # resolved already (by the detector before a restart, job end or idle): stays so
            self.stats.replays_dropped += 1
            return None
        previous = entry.incident
        firsts = [s for s in (previous.step_first, incident.step_first) if s is not None]
        state = incident.state if incident.state != "open" or canonical == incident.incident_id else "update"
        merged = replace(incident, incident_id=canonical, state=state,
                         step_first=min(firsts) if firsts else None)
        self._store(merged, canonical)
        return merged

    def _first_sight(self, incident: Incident) -> str | None:
        """Decide what a detector id never seen before stands for; None when it is dropped."""
        key = ledger_key(incident)
        entry = self._entries.get(key)
        own = incident.incident_id
        alias = self._alias.setdefault(incident.job, {})
        if incident.job in self._ended:
            alias[own] = _SUPPRESSED
            self.stats.replays_dropped += 1
            return None
        if entry is not None and entry.incident.incident_id == own:
            alias[own] = own  # restored under the same id (same episode, same first step)
            return own
        if entry is not None and not entry.resolved:
            alias[own] = entry.incident.incident_id
            self.stats.merged_opens += 1
            return entry.incident.incident_id
        if entry is not None and _inside(incident, entry.incident):
            alias[own] = _SUPPRESSED
            self.stats.replays_dropped += 1
            return None
        if entry is not None and entry.adopted and _soon_after(incident, entry.incident):
            entry.resolved = False  # the restart's gap, not the fault's end: same incident again
            alias[own] = entry.incident.incident_id
            self.stats.reopened += 1
            return entry.incident.incident_id
        alias[own] = own
        return own

    def _store(self, incident: Incident, canonical: str) -> None:
        key = ledger_key(incident)
        before = self._entries.get(key)
        adopted = before is not None and before.adopted and before.incident.incident_id == canonical
        self._entries[key] = _Entry(incident, incident.state == "resolved", adopted)
        self._by_id[canonical] = key

    def _command(self, command: ControlCommand) -> ControlCommand | None:
        if command.incident_id is None:
            return command
        canonical = self._alias.get(command.job, {}).get(command.incident_id, command.incident_id)
        issued = self._commands.setdefault(command.job, set())
        if canonical == _SUPPRESSED or (canonical, command.action) in issued:
            self.stats.commands_dropped += 1
            return None
        issued.add((canonical, command.action))
        if canonical == command.incident_id:
            return command
        return replace(command, incident_id=canonical,
                       command_id=command.command_id.replace(command.incident_id, canonical))

    def has_ended(self, job: str) -> bool:
        return job in self._ended

    # --- lifecycle ------------------------------------------------------------------------------
    def job_ended(self, job: str, now_ns: int) -> list[Incident]:
        """The engine finished the job (its end event arrived and its last step was analysed): resolve
        whatever of it is still open; later opens for it are dropped. Not on the end event's arrival
        alone: the job's last group summaries may still be on their way."""
        self._ended[job] = now_ns
        out = self._resolve(lambda key: key[0] == job, now_ns)
        self.stats.resolved_on_end += len(out)
        return out

    def expire(self, now_ns: int) -> list[Incident]:
        """Resolve the open incidents of jobs idle for `idle_ns`; forget long-ended or long-quiet jobs."""
        idle = {job for job, seen in self._last_seen.items() if now_ns - seen >= self.idle_ns}
        out = self._resolve(lambda key: key[0] in idle, now_ns) if idle else []
        self.stats.resolved_idle += len(out)
        for job in idle:
            self._quiet.setdefault(job, now_ns)
        for since in (self._ended, self._quiet):
            for job, at in list(since.items()):
                if now_ns - at >= ENDED_JOBS_KEPT_NS:
                    self._forget(job)
        return out

    def _resolve(self, which: Callable[[Key], bool], now_ns: int) -> list[Incident]:
        out: list[Incident] = []
        for key, entry in self._entries.items():
            if entry.resolved or not which(key):
                continue
            resolved = replace(entry.incident, state="resolved", detected_ns=now_ns)
            entry.incident, entry.resolved = resolved, True
            out.append(resolved)
        return out

    def _forget(self, job: str) -> None:
        for key in [k for k in self._entries if k[0] == job]:
            entry = self._entries.pop(key)
            self._by_id.pop(entry.incident.incident_id, None)
        self._alias.pop(job, None)
        self._commands.pop(job, None)
        self._ended.pop(job, None)
        self._quiet.pop(job, None)
        self._last_seen.pop(job, None)


def _soon_after(incident: Incident, episode: Incident) -> bool:
    """Within REOPEN_WITHIN_STEPS steps, or REOPEN_WITHIN_NS of wall time, of the episode's end."""
    if 0 <= incident.detected_ns - episode.detected_ns <= REOPEN_WITHIN_NS:
        return True
    if incident.step_first is None or episode.step_last is None:
        return False
    return 0 <= incident.step_first - episode.step_last <= REOPEN_WITHIN_STEPS


def _inside(incident: Incident, episode: Incident) -> bool:
    """True when `incident` starts within `episode`'s steps (a replay of input already judged)."""
    if incident.step_first is None or episode.step_last is None:
        return False
    return incident.step_first <= episode.step_last
