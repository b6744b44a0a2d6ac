"""Render the demo's findings as Markdown (no plotting: a report is text an operator can diff).

Every value that comes from data (job ids, hosts, summaries, causes) goes through `md`, so
a hostile string stays one table cell of text: it cannot end the cell (`|`), start a new
line or row (newlines), open code or emphasis (backticks, `*`, `_`), forge a link (`[`) or
inject HTML (`<`, `&`).
"""

from __future__ import annotations

import html
import re
from typing import Any

# `_` inside a word (gc_ms, SLOW_RANK) never starts emphasis in CommonMark: left as is.
_MD_SPECIAL = re.compile(r"([\\`*{}\[\]|#~!]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def plain(value: object) -> str:
    """`value` for one terminal line: control characters (newlines included) shown escaped."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(value))


def md(value: object) -> str:
    """`value` as inert Markdown text for one table cell or line (see the module docstring)."""
    text = html.escape(str(value), quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _fmt_steps(steps: list[int]) -> str:
    if not steps:
        return "—"
    runs: list[str] = []
    start = prev = steps[0]
    for s in [*steps[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        runs.append(str(start) if start == prev else f"{start}–{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(runs)


def _attempts(attempts: list[dict[str, int]]) -> list[str]:
    """One line per launch when the job was relaunched (contract 1.4 `attempt`); none for one launch."""
    if len(attempts) < 2:
        return []
    return [f"Relaunched: {len(attempts)} attempts.", ""] + [
        f"- attempt {md(a['attempt'])}: steps {md(a['first_step'])}–{md(a['last_step'])}, {md(a['ranks'])} ranks, "
        f"{md(a['steps_rows'])} step rows" for a in attempts]


def render_markdown(report: dict[str, Any]) -> str:
    res = report["results"]
    sc = report["scores"]
    lines = [
        f"# steplens report — job {md(report['job'])}",
        "",
        f"{md(report['world'])} ranks, {md(report['steps'])} steps, seed {md(report['seed'])}, "
        f"landed in {md(report['backend'])}.",
        f"Landed {md(res['steps_rows'])} step rows for {md(res['ranks'])} ranks (last step {md(res['last_step'])}).",
        *_attempts(res.get("attempts") or []),
        "",
        "## Found vs injected",
        "",
        "| question | injected (ground truth) | found | precision | recall |",
        "|---|---|---|---|---|",
        f"| slow rank | {', '.join(map(str, sc['slow_rank']['truth'])) or '—'} | "
        f"{', '.join(map(str, sc['slow_rank']['found'])) or '—'} | "
        f"{sc['slow_rank']['precision']:.2f} | {sc['slow_rank']['recall']:.2f} |",
        f"| slow steps | {_fmt_steps(sc['slow_step']['truth'])} | {_fmt_steps(sc['slow_step']['found'])} | "
        f"{sc['slow_step']['precision']:.2f} | {sc['slow_step']['recall']:.2f} |",
        "",
        "## Incidents (latest state, from ClickHouse)",
        "",
        "| rule | state | severity | ranks | steps | summary | likely cause | suggestion |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for inc in res["incidents"]:
        steps = (f"{inc['step_first']}" if inc["step_first"] == inc["step_last"]
                 else f"{inc['step_first']}–{inc['step_last']}")
        lines.append(
            f"| {md(inc['rule'])} | {md(inc['state'])} | {md(inc['severity'])} | "
            f"{md(', '.join(map(str, inc['ranks'])) or '—')} | {md(steps)} | {md(inc['summary'])} | "
            f"{md(inc['cause'] or '—')} | {md(inc['suggestion'] or '—')} |"
        )
    lines += [
        "",
        "## Slowest ranks by SQL (mean busy time = step time − exposed communication)",
        "",
        "| rank | busy ms |",
        "|---|---|",
        *[f"| {md(r['rank'])} | {md(r['busy_ms'])} |" for r in res["slowest_ranks_sql"]],
        "",
        f"Malformed events sent: {report['bad_events_sent']}; dead letters recorded during this run: "
        f"{res['dead_letters']}. Alerts received on the alerts topic: {len(report['alerts_received'])}.",
        "",
        "Timings: " + ", ".join(f"{k} {v:.1f}" for k, v in report["timings_s"].items()),
        "",
    ]
    return "\n".join(lines)
