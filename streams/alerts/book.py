"""Which incidents are firing, and which alerts are due to be (re-)posted to Alertmanager.

Why a book: Alertmanager forgets an alert once its `endsAt` passes, so a client re-sends
each active alert while it lasts (Prometheus re-sends every minute with `endsAt` four
re-sends ahead; this does the same with `resend_s`). An incident's events are not that
regular (an open, then updates only when something changes), so the book keeps every
firing incident and says when each is due again. A resolved incident is posted once more
with `endsAt` at its resolution and then forgotten.

Restarts: the bridge commits its offsets only after the alerts of everything it read are
posted. A new bridge rebuilds the book by replaying the topic from its beginning up to the
committed offsets (`apply(..., replay=True)`): incidents resolved in that stretch were
posted resolved already and are dropped; the still-firing ones are posted once as a
refresh (the same labels: Alertmanager updates the alert it has, no second alert).

Mitigation actions (the actions topic) are alerts of their own beside the incidents
(`apply_action`): a drain or relaunch done, or awaiting approval, fires until it is undone or
approved, or its incident resolves.

Pure: time comes in as `now_ns`, nothing here does I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from schemas import Incident, MitigationAction
from streams.alerts.mapping import action_annotations, action_labels, alert, annotations_of, labels_of, report_link

DEFAULT_RESEND_S = 60.0
ACTION_KEY = "action:"  # an action's entry, beside the incidents' (keyed by incident id)
MAX_ENDED = 100_000  # ends remembered (incidents resolved, actions undone): the newest
EXPIRY_RESENDS = 4  # a firing alert's endsAt lies this many re-sends ahead (Prometheus: 4 x resend delay)


@dataclass(slots=True)
class Entry:
    """One incident the bridge knows: the labels it was first posted with, its latest event."""

    labels: dict[str, str]
    latest: Incident | MitigationAction
    starts_ns: int
    ends_ns: int | None = None      # set once resolved
    posted_ns: int | None = None    # last successful post of this state; None: due now


class AlertBook:
    """Firing incidents by id, and the alerts due at a given time (see the module docstring)."""

    def __init__(self, resend_s: float = DEFAULT_RESEND_S, report_template: str = "",
                 generator_template: str = "", runbook_base: str = "") -> None:
        if resend_s <= 0:
            raise ValueError(f"resend_s must be positive, got {resend_s}")
        self.resend_ns = int(resend_s * 1e9)
        self.report_template = report_template
        self.generator_template = generator_template
        self.runbook_base = runbook_base
        self.entries: dict[str, Entry] = {}
        # incidents resolved and actions undone: a record of either read after the end (another topic or
        # partition delivered first) must not fire again
        self.ended: OrderedDict[str, None] = OrderedDict()

    def _remember_end(self, key: str) -> None:
        self.ended[key] = None
        self.ended.move_to_end(key)
        while len(self.ended) > MAX_ENDED:
            self.ended.popitem(last=False)

    def apply(self, incident: Incident, replay: bool = False) -> None:
        """Take one event of the incidents topic, in topic order.

        `replay`: the event lies before the committed offsets, so its alert was posted already;
        a resolution there drops the incident at once.
        """
        entry = self.entries.get(incident.incident_id)
        if entry is None:
            entry = Entry(labels=labels_of(incident), latest=incident, starts_ns=incident.detected_ns)
            self.entries[incident.incident_id] = entry
        entry.latest = incident
        entry.posted_ns = None
        if incident.state == "resolved":
            entry.ends_ns = incident.detected_ns
            if replay:
                del self.entries[incident.incident_id]
            self._remember_end(incident.incident_id)  # the actions taken for it are over too
            for key, other in list(self.entries.items()):
                if isinstance(other.latest, MitigationAction) and other.latest.incident_id == incident.incident_id:
                    self._end(key, other, incident.detected_ns, replay)
        else:
            entry.ends_ns = None  # an update after a resolution fires again (same alert), and so may its actions
            self.ended.pop(incident.incident_id, None)

    def apply_action(self, action: MitigationAction, replay: bool = False) -> None:
        """Take one record of the actions topic: a drain or relaunch done, or awaiting approval, fires (one
        alert per action id: the approval updates it); an undo ends the alert of the action it reverses."""
        if action.level == "undo":
            key = ACTION_KEY + (action.undoes or "")
            self._remember_end(key)
            entry = self.entries.get(key)
            if entry is not None:
                self._end(key, entry, action.at_ns, replay)
            return
        if action.verdict not in ("act", "dry_run") or action.level not in ("drain", "relaunch"):
            return
        if ACTION_KEY + action.action_id in self.ended or action.incident_id in self.ended:
            return  # undone, or its incident resolved, before this record was read
        key = ACTION_KEY + action.action_id
        entry = self.entries.get(key)
        if entry is None:
            entry = Entry(labels=action_labels(action), latest=action, starts_ns=action.at_ns)
            self.entries[key] = entry
        entry.latest = action
        entry.posted_ns = None

    def _end(self, key: str, entry: Entry, at_ns: int, replay: bool) -> None:
        if replay:
            del self.entries[key]
            return
        entry.ends_ns = max(at_ns, entry.starts_ns)
        entry.posted_ns = None

    def firing(self) -> int:
        return sum(1 for e in self.entries.values() if e.ends_ns is None)

    def next_due_ns(self) -> int | None:
        """When the next alert falls due (None: nothing known); a never-posted one is due now (0)."""
        times = [0 if e.posted_ns is None else e.posted_ns + self.resend_ns for e in self.entries.values()]
        return min(times) if times else None

    def due(self, now_ns: int) -> list[tuple[str, dict[str, Any]]]:
        """(incident id, alert body) of every alert to post now: changed, or firing and due a re-send."""
        out: list[tuple[str, dict[str, Any]]] = []
        for incident_id, entry in self.entries.items():
            if entry.posted_ns is not None and now_ns - entry.posted_ns < self.resend_ns:
                continue
            ends = entry.ends_ns if entry.ends_ns is not None else now_ns + EXPIRY_RESENDS * self.resend_ns
            latest = entry.latest
            if isinstance(latest, MitigationAction):
                out.append((incident_id, alert(entry.labels, action_annotations(latest, self.runbook_base),
                                               entry.starts_ns, ends)))
                continue
            generator = self.generator_template and report_link(self.generator_template, latest)
            notes = annotations_of(latest, self.report_template, self.runbook_base)
            out.append((incident_id, alert(entry.labels, notes, entry.starts_ns, ends, generator)))
        return out

    def posted(self, incident_ids: list[str], now_ns: int) -> None:
        """Alertmanager took these alerts: resolved ones are done, firing ones wait for their re-send."""
        for incident_id in incident_ids:
            entry = self.entries.get(incident_id)
            if entry is None:
                continue
            if entry.ends_ns is not None:
                del self.entries[incident_id]
            else:
                entry.posted_ns = now_ns
