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

Pure: time comes in as `now_ns`, nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import Incident
from streams.alerts.mapping import alert, annotations_of, labels_of, report_link

DEFAULT_RESEND_S = 60.0
EXPIRY_RESENDS = 4  # a firing alert's endsAt lies this many re-sends ahead (Prometheus: 4 x resend delay)


@dataclass(slots=True)
class Entry:
    """One incident the bridge knows: the labels it was first posted with, its latest event."""

    labels: dict[str, str]
    latest: Incident
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
        else:
            entry.ends_ns = None  # an update after a resolution fires again (same alert)

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
            generator = (self.generator_template and
                         report_link(self.generator_template, entry.latest))
            notes = annotations_of(entry.latest, self.report_template, self.runbook_base)
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
