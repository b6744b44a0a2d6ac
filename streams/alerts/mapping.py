"""One incident as one Alertmanager alert: labels that name it, annotations that describe it.

Alertmanager identifies an alert by its label set: the same labels posted again update
that alert, different labels make another one. So the labels are fixed by the first event
of an incident the bridge sees (`labels_of`) and carry its `incident_id` (two incidents of
one rule on one rank never merge into one alert); everything that changes while an
incident goes on (summary, steps, figures, even a severity upgrade) is an annotation,
taken from its latest event (`annotations_of`).

Prometheus' conventions, so steplens' alerts sit in an Alertmanager beside everything else:
`alertname` is CamelCase (`SteplensSlowRank`; the spec's rule id stays in the `rule` label);
the training job is `training_job`, never `job`, which Prometheus gives the scrape job
(steplens' own worker alerts carry `job="steplens"` in the same Alertmanager); annotations
`summary`, `description` and `runbook_url` (a section of docs/runbooks.md per rule). Labels:
alertname, rule, training_job, scope, severity, incident_id and, when the incident names
them, host, rank (one rank), group (domain/group), stage, device, link, attempt.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from schemas import Incident, MitigationAction

# the spec's rule ids read as alert names (the rest: "Steplens" + the id in CamelCase)
ALERT_NAMES = {
    "R1": "SteplensStaticBound", "R2": "SteplensDrift", "R3": "SteplensThroughputDrop",
    "R4": "SteplensKernelEfficiency", "R5": "SteplensSlowRankInGroup", "R6": "SteplensGroupBandwidth",
    "R7": "SteplensMinorityKernels", "R8": "SteplensLaunchLatency", "R9": "SteplensCopyRate",
    "R10": "SteplensInterstepCpu", "OOM": "SteplensOutOfMemorySoon",
}
RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"


def alert_name(rule: str) -> str:
    """`SLOW_RANK` -> `SteplensSlowRank`, `R4` -> `SteplensKernelEfficiency`."""
    return ALERT_NAMES.get(rule) or "Steplens" + "".join(w.capitalize() for w in rule.split("_"))


def runbook_url(rule: str, base: str = "") -> str:
    """The rule's section of docs/runbooks.md (anchor: the rule id in lower case), under `base` when
    the docs are served (setting `alerts_runbook_url`), else the file in this checkout."""
    anchor = rule.lower()
    return f"{base.rstrip('#')}#{anchor}" if base else f"{RUNBOOK.as_uri()}#{anchor}"


MAX_ANNOTATION_CHARS = 2000  # an annotation is shown in chat messages and pages: the incident's text is capped


def labels_of(incident: Incident) -> dict[str, str]:
    """The alert's identity (stable for the incident's life: the first event's values)."""
    labels = {
        "alertname": alert_name(incident.rule),
        "rule": incident.rule,
        "training_job": incident.job,
        "scope": incident.scope,
        "severity": incident.severity,
        "incident_id": incident.incident_id,
    }
    if incident.host:
        labels["host"] = incident.host
    if len(incident.ranks) == 1:
        labels["rank"] = str(incident.ranks[0])
    if incident.group is not None:
        labels["group"] = f"{incident.domain}/{incident.group}" if incident.domain else str(incident.group)
    if incident.stage is not None:
        labels["stage"] = str(incident.stage)
    if incident.device is not None:
        labels["device"] = str(incident.device)
    if incident.link:
        labels["link"] = incident.link
    if incident.attempt:
        labels["attempt"] = str(incident.attempt)  # a relaunch's alerts are told from the crashed launch's
    return labels


def report_link(template: str, incident: Incident) -> str:
    """Where an operator reads more: `template` with {job}, {incident_id} and {rule} filled in,
    or by default the steplens command that lists the job's incidents of this rule."""
    if template:
        return template.format(job=incident.job, incident_id=incident.incident_id, rule=incident.rule)
    return f"steplens incidents --job {incident.job} --rule {incident.rule}"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ANNOTATION_CHARS else text[: MAX_ANNOTATION_CHARS - 1] + "…"


def _steps(incident: Incident) -> str | None:
    first, last = incident.step_first, incident.step_last
    if first is None and last is None:
        return None
    if first is None or last is None or first == last:
        return str(first if first is not None else last)
    return f"{first}-{last}"


def description(incident: Incident) -> str:
    """The incident in a few lines for a page or a chat message: what, where, why, what to do."""
    lines = [incident.summary]
    where = [f"training job {incident.job}", f"scope {incident.scope}"]
    steps = _steps(incident)
    if steps is not None:
        where.append(f"steps {steps}")
    lines.append(", ".join(where))
    if incident.cause:
        lines.append(f"Likely cause: {incident.cause}.")
    if incident.suggestion:
        lines.append(f"What to do: {incident.suggestion}.")
    return "\n".join(lines)


def annotations_of(incident: Incident, report_template: str = "", runbook_base: str = "") -> dict[str, str]:
    """What the latest event says: summary, description, runbook, cause, suggestion, figures, the report link."""
    notes: dict[str, str] = {
        "summary": incident.summary,
        "description": description(incident),
        "runbook_url": runbook_url(incident.rule, runbook_base),
        "incident_id": incident.incident_id,
        "state": incident.state,
        "severity": incident.severity,
        "report": report_link(report_template, incident),
    }
    if incident.cause:
        notes["cause"] = incident.cause
    if incident.suggestion:
        notes["suggestion"] = incident.suggestion
    steps = _steps(incident)
    if steps is not None:
        notes["steps"] = steps
    if incident.ranks:
        notes["ranks"] = ",".join(map(str, incident.ranks))
    if incident.metric:
        notes["metric"] = incident.metric
    figures = [f"{name} {value:g}" for name, value in (("observed", incident.observed),
                                                        ("expected", incident.expected),
                                                        ("threshold", incident.threshold)) if value is not None]
    if figures:
        notes["figures"] = ", ".join(figures) + (f" {incident.unit}" if incident.unit else "")
    if incident.rules:
        notes["rules"] = ",".join(incident.rules)
    return {key: _clip(value) for key, value in notes.items()}


def rfc3339(ns: int) -> str:
    """Alertmanager's time format (UTC, millisecond precision)."""
    moment = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert(labels: dict[str, str], annotations: dict[str, str], starts_ns: int, ends_ns: int,
          generator_url: str = "") -> dict[str, Any]:
    """One element of the body of POST /api/v2/alerts (endsAt never before startsAt: Alertmanager refuses that)."""
    body: dict[str, Any] = {
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(starts_ns),
        "endsAt": rfc3339(max(ends_ns, starts_ns)),
    }
    if generator_url:
        body["generatorURL"] = generator_url
    return body


ACTION_ALERT = "SteplensMitigation"


def action_labels(action: MitigationAction) -> dict[str, str]:
    """A mitigation action's alert: one per action id (a dry run and its approval are the same alert)."""
    labels = {"alertname": ACTION_ALERT, "training_job": action.job, "incident_id": action.incident_id,
              "action_id": action.action_id, "level": action.level, "partition": action.partition,
              "severity": "warning" if action.verdict == "act" else "info"}
    if action.host:
        labels["host"] = action.host
    return labels


def action_annotations(action: MitigationAction, runbook_base: str = "") -> dict[str, str]:
    """What was decided and why, the figures, and the one command an operator answers it with."""
    done = {"act": "done", "dry_run": "awaiting approval (dry run)"}.get(action.verdict, action.verdict)
    verb = {"drain": "drain", "relaunch": "drain and relaunch the job without"}.get(action.level, action.level)
    answer = (f"steplens actions approve {action.action_id}" if action.verdict == "dry_run"
              else f"steplens actions undo {action.action_id}")
    notes = {
        "summary": f"steplens: {verb} {action.host or 'the node'} for {action.incident_id}: {done}",
        "description": (f"{action.reason}. Guard rails: {action.why}. Slowdown {action.slowdown:.1%}, "
                        f"{action.age_s:.0f} s old, expected {action.expected_remaining_s:.0f} s more "
                        f"({action.history_n} past faults); waiting {action.keep_cost_gpu_h:.1f} GPU-h vs acting "
                        f"{action.act_cost_gpu_h:.1f} GPU-h. By {action.by}."),
        "verdict": action.verdict,
        "command": answer,
        "runbook_url": runbook_url("mitigation", runbook_base),
    }
    return {key: _clip(value) for key, value in notes.items()}
