"""Assemble the report page from `steplens.queries.report.ReportData` (no queries here)."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from steplens.queries.base import Result
from steplens.queries.report import ReportData
from steplens.report_html import svg

_CSS = (
    "body{font-family:sans-serif;margin:24px;color:#222}h2{margin-top:28px}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
    "th{background:#f2f2f2}.plot{border:1px solid #ddd;display:block;margin:8px 0}"
)


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


def _epoch(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=value.tzinfo or dt.UTC).timestamp()
    return float(value)


def _range(start_ns: int, end_ns: int) -> str:
    def one(ns: int, open_end: str) -> str:
        if ns <= 0 or ns >= 2**62:
            return open_end
        return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")

    return f"from {one(start_ns, 'the beginning')} to {one(end_ns, 'now')}"


def render(data: ReportData, generated: dt.datetime) -> str:
    incidents = data.tables.get("incidents")
    points = [(_epoch(r[0]), str(r[2]), f"{r[0]} {r[1]} {r[10]}") for r in (incidents.rows if incidents else [])]
    heat_label = (f"ranks ({data.heat_axes[0]}/row) x steps (1 sampled per {data.heat_axes[1]}/column), "
                  "busy time / column median")
    sections = [
        ("Throughput over time", svg.line("tokens/s", [float(r[1]) for r in data.series], "tokens/s per minute")),
        ("MFU over time", svg.line("MFU", [float(r[2]) for r in data.series], "MFU per minute", "#ff7f0e")),
        ("Step-time distribution", svg.histogram("step time", data.step_times, "job step time, ms")),
        ("Rank × step slowness", svg.heatmap("slowness", data.heat, heat_label)),
        ("Incident timeline", svg.timeline("incidents", points, "incidents by rule over time")),
    ]
    tables = [
        ("Job performance", "job-performance"), ("Top offenders: slowest ranks", "slowest-ranks"),
        ("Top offenders: slowest hosts", "slowest-hosts"), ("Recurrent offenders (hosts to isolate)",
                                                            "recurrent-offenders"),
        ("Device-hours lost", "device-hours-lost"), ("Device health", "device-health"), ("Incidents", "incidents"),
    ]
    parts = [f"<h2>{escape(t)}</h2>{plot}" for t, plot in sections]
    parts += [f"<h2>{escape(t)}</h2>{_table(data.tables.get(name))}" for t, name in tables]
    tr = data.time_range
    scope = f"job {data.job}" if data.job else "the whole cluster"
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{escape(data.title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(data.title)}</h1><p>Scope: {escape(scope)}; {escape(_range(tr.start_ns, tr.end_ns))}; "
        f"generated {generated.isoformat(timespec='seconds')}.</p>" + "".join(parts) + "</body></html>"
    )
