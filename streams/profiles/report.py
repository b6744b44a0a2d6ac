"""Render a diagnosis: plain text for the terminal, a self-contained HTML page (inline SVG, no network)."""

from __future__ import annotations

import html
import math
from pathlib import Path

from streams.profiles.analysis.breakdown import Breakdown
from streams.profiles.analysis.diagnose import Diagnosis
from streams.profiles.analysis.rank_table import RankRow
from streams.profiles.analysis.waits import CollectiveWait

_PARTS = (("compute", "#4c78a8"), ("overlapped", "#72b7b2"), ("communication_not_overlapped", "#f58518"),
          ("memory_not_overlapped", "#b279a2"), ("free", "#d3d3d3"))


TOP_WAITS_TEXT = 15
TOP_WAITS_HTML = 200
RANK_COLUMNS = ("rank", "source", "stage", "steps", "step ms", "compute", "comm", "overlap", "comm-exp", "free",
                "bubble", "waited for")
WAIT_COLUMNS = ("collective", "group", "at", "ranks", "T_max ms", "T_avg ms", "R_wait", "late rank")


def _label(rank: int | None, source: str) -> str:
    return f"rank {rank}" if rank is not None else source


def _ms(us: float) -> str:
    return "-" if math.isnan(us) else f"{us / 1e3:.2f}"


def rank_cells(r: RankRow) -> list[str]:
    return [str(r.rank) if r.rank is not None else "-", Path(r.source).name[:32],
            str(r.stage) if r.stage is not None else "-",
            str(r.steps), *(_ms(v) for v in (r.span, r.compute, r.communication, r.overlapped,
                                              r.communication_not_overlapped, r.free, r.bubble)), str(r.waited_for)]


def wait_cells(w: CollectiveWait) -> list[str]:
    return [w.op, w.group, w.index, str(w.ranks), _ms(w.t_max_us), _ms(w.t_avg_us), f"{w.r_wait:.3f}",
            str(w.late_rank)]


def _text_table(header: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return ["   " + " ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [list(header), *rows]]


def text_report(diag: Diagnosis) -> str:
    lines: list[str] = []
    for r in diag.ranks:
        p = r.profile
        lines.append(f"== {_label(p.rank, p.source)} ({p.format}, {p.source}): {len(p.kernels)} device tasks, "
                     f"{len(p.steps)} steps, {len(p.collectives)} collectives")
        lines.append(f"   {'step':>6} {'span ms':>9} {'compute':>9} {'comm':>9} {'overlap':>9} {'comm-exp':>9} "
                     f"{'free':>9}")
        for b in r.steps:
            lines.append(f"   {b.step:>6} {b.span / 1e3:>9.2f} {b.compute / 1e3:>9.2f} {b.communication / 1e3:>9.2f} "
                         f"{b.overlapped / 1e3:>9.2f} {b.communication_not_overlapped / 1e3:>9.2f} "
                         f"{b.free / 1e3:>9.2f}")
        if r.critical.tasks:
            kinds = ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in r.critical.by_kind_us.items())
            lines.append(f"   critical path {r.critical.length_us / 1e3:.1f} ms over {r.critical.tasks} tasks: {kinds}")
    if diag.rank_table:
        lines.append("== ranks (means per step, ms; 'waited for': collectives where the others waited for it)")
        lines.extend(_text_table(RANK_COLUMNS, [rank_cells(r) for r in diag.rank_table]))
    if diag.waits:
        lines.append(f"== collectives by wait ratio R_wait = 1 - T_avg/T_max (top {TOP_WAITS_TEXT} of "
                     f"{len(diag.waits)}; p2p left out)")
        lines.extend(_text_table(WAIT_COLUMNS, [wait_cells(w) for w in diag.waits[:TOP_WAITS_TEXT]]))
    lines.append("== diagnosis (cause -> optimisation; evidence)")
    findings = diag.findings()
    if not findings:
        lines.append("   nothing abnormal found")
    for f in findings:
        lines.append(f" [{f.severity}] {f.where()}: {f.summary}")
        lines.append(f"     cause: {f.advice.cause} -> {f.advice.suggestion}")
        lines.append(f"     evidence: {f.evidence_text()}")
    return "\n".join(lines)


def _bars(steps: list[Breakdown], width: int = 640) -> str:
    if not steps:
        return ""
    longest = max(b.span for b in steps) or 1.0
    h = 18
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 80}" height="{h * len(steps) + 24}">']
    for i, b in enumerate(steps):
        x = 70.0
        y = i * h + 2
        out.append(f'<text x="0" y="{y + 13}" font-size="12">step {b.step}</text>')
        for part, colour in _PARTS:
            value = getattr(b, part) if part != "overlapped" else b.overlapped
            if part == "compute":
                value = b.compute - b.overlapped
            w = width * max(value, 0.0) / longest
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h - 4}" fill="{colour}">'
                       f'<title>{part}: {value / 1e3:.2f} ms</title></rect>')
            x += w
    y = h * len(steps) + 18
    x = 0.0
    for part, colour in _PARTS:
        out.append(f'<rect x="{x}" y="{y - 10}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14}" y="{y}" font-size="11">{part.replace("_", " ")}</text>')
        x += 150
    out.append("</svg>")
    return "".join(out)


def _html_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    esc = html.escape
    return ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows) + "</table>")


def html_report(diag: Diagnosis, title: str = "steplens profile diagnosis") -> str:
    esc = html.escape
    body = [f"<h1>{esc(title)}</h1>", "<h2>Diagnosis</h2>", "<table><tr><th>severity</th><th>where</th>"
            "<th>finding</th><th>cause</th><th>optimisation</th><th>evidence</th></tr>"]
    for f in diag.findings():
        body.append(f"<tr><td>{esc(f.severity)}</td><td>{esc(f.where())}</td><td>{esc(f.summary)}</td>"
                    f"<td>{esc(f.advice.cause)}</td><td>{esc(f.advice.suggestion)}</td>"
                    f"<td>{esc(f.evidence_text())}</td></tr>")
    body.append("</table>")
    if diag.rank_table:
        body.append("<h2>Ranks</h2><p>Means per step, ms; <i>waited for</i>: collectives where the others waited "
                    "for this rank.</p>" + _html_table(RANK_COLUMNS, [rank_cells(r) for r in diag.rank_table]))
    if diag.waits:
        shown = diag.waits[:TOP_WAITS_HTML]
        body.append(f"<h2>Collective waits</h2><p>R_wait = 1 − T_avg / T_max over the ranks of each collective "
                    f"(point-to-point left out); {len(shown)} of {len(diag.waits)}, highest first.</p>"
                    + _html_table(WAIT_COLUMNS, [wait_cells(w) for w in shown]))
    for r in diag.ranks:
        p = r.profile
        body.append(f"<h2>{esc(_label(p.rank, p.source))} <small>{esc(p.format)} · {esc(p.source)}</small></h2>")
        body.append(_bars(r.steps))
        body.append("<table><tr>" + "".join(f"<th>{k}</th>" for k in
                    ("step", "span ms", "compute", "communication", "overlapped", "comm not overlapped", "free"))
                    + "</tr>")
        for b in r.steps:
            body.append(f"<tr><td>{b.step}</td>" + "".join(f"<td>{v / 1e3:.2f}</td>" for v in (
                b.span, b.compute, b.communication, b.overlapped, b.communication_not_overlapped, b.free)) + "</tr>")
        body.append("</table>")
        if r.critical.top:
            body.append("<p>Critical path: " + esc(", ".join(f"{n[:60]} {t / 1e3:.1f} ms" for n, t in r.critical.top))
                        + "</p>")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>")
