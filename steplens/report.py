"""Render the demo's findings as Markdown (no plotting: a report is text an operator can diff)."""

from __future__ import annotations

from typing import Any


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


def render_markdown(report: dict[str, Any]) -> str:
    res = report["results"]
    sc = report["scores"]
    lines = [
        f"# steplens report — job {report['job']}",
        "",
        f"{report['world']} ranks, {report['steps']} steps, seed {report['seed']}, landed in {report['backend']}.",
        f"Landed {res['steps_rows']} step rows for {res['ranks']} ranks (last step {res['last_step']}).",
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
            f"| {inc['rule']} | {inc['state']} | {inc['severity']} | {', '.join(map(str, inc['ranks'])) or '—'} | "
            f"{steps} | {inc['summary']} | {inc['cause'] or '—'} | {inc['suggestion'] or '—'} |"
        )
    lines += [
        "",
        "## Slowest ranks by SQL (mean busy time = step time − exposed communication)",
        "",
        "| rank | busy ms |",
        "|---|---|",
        *[f"| {r['rank']} | {r['busy_ms']} |" for r in res["slowest_ranks_sql"]],
        "",
        f"Malformed events sent: {report['bad_events_sent']}; dead letters recorded during this run: "
        f"{res['dead_letters']}. Alerts received on the alerts topic: {len(report['alerts_received'])}.",
        "",
        "Timings: " + ", ".join(f"{k} {v:.1f}" for k, v in report["timings_s"].items()),
        "",
    ]
    return "\n".join(lines)
