"""Assemble the report page from `steplens.queries.report.ReportData` (no queries here).

One self-contained HTML file: plotly.js is inlined once (no CDN, opens offline), each chart
is a figure spec from `charts` drawn by `Plotly.newPlot`. plotly over Vega-Lite, measured in
headless Chromium on a 512 x 1,000 heat map: plotly draws it in 0.33 s (its heat map is one
image), Vega-Lite 5 (vega-embed bundle from vl-convert) in 2.9 s (one mark per cell); plotly's
script is bigger (4.8 MB against 0.9 MB) but the page is one file either way.
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from html import escape
from pathlib import Path
from typing import Any

import orjson

from steplens.queries.base import Result
from steplens.queries.report import ReportData
from steplens.report_html import charts

_CSS = (
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}h2{margin-top:28px}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
    "th{background:#f2f2f2}.chart{border:1px solid #e4e4e4;margin:8px 0;min-height:260px}"
    ".grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}.grid .chart{min-width:0}"
    "p.note{color:#555;font-size:13px}"
)
_CONFIG = {"responsive": True, "displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


@cache
def plotly_js() -> str:
    """plotly.js as shipped in the pinned `plotly` package (pyproject.toml): read once per process."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return escape(", ".join(str(v) for v in value[:8]) + (" …" if len(value) > 8 else ""))
    return escape(str(value))


def _table(result: Result | None, limit: int = 30) -> str:
    if result is None or not result.rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in result.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in result.rows[:limit])
    return f"<table class='data' data-name='{escape(result.name)}'><tr>{head}</tr>{body}</table>"


def _range(start_ns: int, end_ns: int) -> str:
    def one(ns: int, open_end: str) -> str:
        if ns <= 0 or ns >= 2**62:
            return open_end
        return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")

    return f"from {one(start_ns, 'the beginning')} to {one(end_ns, 'now')}"


def _expected_level(data: ReportData) -> tuple[float | None, str]:
    """The step time the reference models expect of the job (None without models, or for the cluster)."""
    e = data.expected.expectation if data.expected is not None and data.job else None
    if e is None:
        return None, ""
    return e.step.expected_ms, f"expected (reference models v{e.version})"


def _expected_section(data: ReportData) -> str:
    """What the fleet's reference models expect of the job's typical step, per component (docs/model.md)."""
    if not data.focus:
        return ""
    head = "<h2>Expected vs observed (fleet reference models)</h2>"
    got = data.expected
    if got is None:
        return head + "<p class='none'>no steps of this job in the range</p>"
    if got.expectation is None:
        return head + "<p class='note'>no reference models: run <code>steplens model fit</code></p>"
    e = got.expectation
    note = (f"<p class='note' id='expected-summary'>Job {escape(got.job)}, the median of steps {got.step_first}–"
            f"{got.step_last} against reference models v{e.version}: {escape(e.summary())}. Ratio = observed / "
            "expected (above 1: slower than the fleet achieves on the same links and device kind); ms per step, "
            "the typical rank's.</p>")
    return head + note + _table(data.tables.get("expected-vs-observed"))


def figures(data: ReportData) -> dict[str, charts.Figure]:
    """Every chart of the page by its element id, in page order."""
    incidents = data.tables.get("incidents")
    spans = charts.incident_spans(incidents, data.series)
    return {
        "throughput": charts.throughput(data.series, data.series_scope, spans),
        "step-time": charts.step_time(data.series, data.series_scope, spans, *_expected_level(data)),
        "step-distribution": charts.distribution(data.step_times, data.focus),
        "heatmap": charts.heatmap(data.heat, data.focus),
        "slowest-ranks": charts.offenders(data.tables.get("slowest-ranks"), "rank"),
        "slowest-hosts": charts.offenders(data.tables.get("slowest-hosts"), "host"),
        "incident-timeline": charts.incident_timeline(incidents),
    }


def script_json(value: Any) -> str:
    """JSON safe inside <script>: no '<' at all, so no data string can close the element or open a comment."""
    return orjson.dumps(value).decode().replace("<", "\\u003c")


def render(data: ReportData, generated: dt.datetime) -> str:
    figs = figures(data)
    div = "<div class='chart' id='{0}' data-chart='{0}'></div>".format
    body = [
        "<h2>Throughput over time</h2>", div("throughput"), div("step-time"),
        "<p class='note'>Shaded bands and ▼ markers are incidents (hover for the rule, ranks and steps); "
        "drag to zoom, double-click to reset.</p>",
        "<h2>Step times and slowness</h2><div class='grid'>", div("step-distribution"), div("incident-timeline"),
        "</div>", div("heatmap"),
        "<h2>Top offenders</h2><div class='grid'>", div("slowest-ranks"), div("slowest-hosts"), "</div>",
    ]
    tables = [
        ("Job performance", "job-performance"), ("Top offenders: slowest ranks", "slowest-ranks"),
        ("Top offenders: slowest hosts", "slowest-hosts"),
        ("Recurrent offenders (hosts to isolate)", "recurrent-offenders"),
        ("Device-hours lost", "device-hours-lost"), ("Device health", "device-health"), ("Incidents", "incidents"),
    ]
    body.append(_expected_section(data))
    body += [f"<h2>{escape(t)}</h2>{_table(data.tables.get(name))}" for t, name in tables]
    tr = data.time_range
    scope = f"job {data.job}" if data.job else "the whole cluster"
    draw = (
        f"const FIGS={script_json(figs)};const CONFIG={script_json(_CONFIG)};"
        "window.REPORT_READY=Promise.all(Object.entries(FIGS).map(([id,f])=>Plotly.newPlot(id,f.data,f.layout,CONFIG)));"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{escape(data.title)}</title><style>{_CSS}</style>"
        f"<script>{plotly_js()}</script></head><body>"
        f"<h1>{escape(data.title)}</h1><p>Scope: {escape(scope)}; {escape(_range(tr.start_ns, tr.end_ns))}; "
        f"generated {generated.isoformat(timespec='seconds')}.</p>" + "".join(body)
        + f"<script>{draw}</script></body></html>"
    )


def write(data: ReportData, path: Path) -> Path:
    """The report to `path` (its folder made), dated now: `steplens report` and the demo write it this way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(data, dt.datetime.now(dt.UTC)), encoding="utf-8")
    return path
