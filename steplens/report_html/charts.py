"""The report's charts as plotly.js figure specs (plain dicts: pure, testable, no drawing here).

plotly.js draws them in the page (axes, ticks, legends, hover, zoom); these functions only
decide what is plotted and how it is labelled. Every string that comes from data (rules,
summaries, hosts) is HTML-escaped, since plotly renders a subset of HTML in text and hover.
"""

from __future__ import annotations

import bisect
import datetime as dt
import html
import math
from collections.abc import Sequence
from typing import Any

from steplens.queries.base import Result
from steplens.queries.report import HeatMap

Figure = dict[str, Any]

INCIDENT_FILL = "rgba(214,39,40,0.13)"
INCIDENT_COLOR = "#d62728"
HEAT_SCALE = [[0.0, "#f7fbff"], [0.25, "#fde0c5"], [0.5, "#fc9272"], [0.75, "#de2d26"], [1.0, "#67000d"]]
HEAT_MIN, HEAT_MAX = 1.0, 1.5  # bin max / column median: 1.5x and above is the darkest red


def iso(ns: int) -> str:
    """Epoch ns as the UTC ISO time plotly's date axes read (ms precision)."""
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")


def _text(value: Any) -> str:
    return html.escape(str(value), quote=False)


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> Figure:
    layout: Figure = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "xaxis": {"title": {"text": x_title}, "showgrid": True, "zeroline": False},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", "zeroline": False},
        "legend": {"orientation": "h", "y": -0.22},
        "margin": {"l": 70, "r": 70, "t": 40, "b": 60},
        "height": 360, "hovermode": "closest",
    }
    layout.update(extra)
    return layout


def _empty(title: str) -> Figure:
    return {"data": [], "layout": {
        **_layout(title, "", ""), "xaxis": {"visible": False}, "yaxis": {"visible": False},
        "annotations": [{"text": "no data in this range", "showarrow": False, "font": {"size": 16},
                         "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]}}


def incident_spans(incidents: Result | None, series: Sequence[tuple[Any, ...]]) -> list[tuple[int, int, str]]:
    """(start ns, end ns, hover text) per incident: its step range's time from the series, else its detection.

    Series rows carry the step range of each bucket (SERIES_COLUMNS); an incident's steps
    map to the buckets that hold them. A per-minute series has none: the detection time it is.
    """
    if incidents is None:
        return []
    firsts = [int(r[7]) for r in series if int(r[7]) >= 0]
    out = []
    for rec in incidents.records():
        detected = rec["detected"]
        det_ns = (int(detected.replace(tzinfo=detected.tzinfo or dt.UTC).timestamp()) * 1_000_000_000
                  if isinstance(detected, dt.datetime) else int(detected))
        start = end = det_ns
        s0, s1 = int(rec["step_first"]), int(rec["step_last"])
        if firsts and s0 >= 0 and s1 >= s0:
            a = max(0, bisect.bisect_right(firsts, s0) - 1)
            b = max(0, bisect.bisect_right(firsts, s1) - 1)
            start, end = int(series[a][0]), int(series[b][1])
        ranks = rec["ranks"] or []
        where = f"ranks {', '.join(map(str, ranks[:8]))}{' …' if len(ranks) > 8 else ''}" if ranks else ""
        steps = f"steps {s0}–{s1}" if s0 >= 0 else ""
        text = "<br>".join(part for part in (
            f"<b>{_text(rec['rule'])}</b> ({_text(rec['severity'])}, {_text(rec['state'])})",
            _text(rec["summary"]), _text(", ".join(p for p in (where, steps) if p)),
            f"detected {iso(det_ns)[:19]} UTC") if part)
        out.append((start, end, text))
    return out


def _mark_incidents(fig: Figure, spans: list[tuple[int, int, str]], y_top: float) -> None:
    """Incidents on a time series: a shaded band over their steps and a hoverable marker on top."""
    if not spans:
        return
    shapes = fig["layout"].setdefault("shapes", [])
    xs = [s for s, _, _ in spans] + [e for _, e, _ in spans]
    long = (max(xs) - min(xs)) // 4
    for start, end, _ in spans:
        if start < end <= start + max(long, 1):  # a long one (a straggler all along) would shade everything
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": iso(start), "x1": iso(end),
                           "y0": 0, "y1": 1, "fillcolor": INCIDENT_FILL, "line": {"width": 0}, "layer": "below"})
        else:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": iso(start), "x1": iso(start),
                           "y0": 0, "y1": 1, "line": {"color": INCIDENT_COLOR, "width": 1, "dash": "dot"}})
    fig["data"].append({
        "type": "scatter", "mode": "markers", "name": "incidents", "x": [iso(s) for s, _, _ in spans],
        "y": [y_top] * len(spans), "text": [t for _, _, t in spans], "hovertemplate": "%{text}<extra></extra>",
        "marker": {"symbol": "triangle-down", "size": 11, "color": INCIDENT_COLOR},
    })


def throughput(series: Sequence[tuple[Any, ...]], scope: str, spans: list[tuple[int, int, str]]) -> Figure:
    """tokens/s (left axis) and MFU % (right axis) over time, incidents marked."""
    title = f"Throughput and MFU ({scope})"
    if not series:
        return _empty(title)
    x = [iso(int(r[0])) for r in series]
    tps = [round(float(r[2]), 1) for r in series]
    fig: Figure = {"data": [
        {"type": "scatter", "mode": "lines+markers" if len(x) < 60 else "lines", "name": "tokens/s",
         "x": x, "y": tps, "line": {"color": "#1f77b4"},
         "hovertemplate": "%{x}<br>%{y:,.0f} tokens/s<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "MFU", "x": x, "yaxis": "y2",
         "y": [round(100 * float(r[3]), 2) for r in series], "line": {"color": "#ff7f0e", "dash": "dot"},
         "hovertemplate": "%{x}<br>MFU %{y:.1f} %<extra></extra>"},
    ], "layout": _layout(title, "time (UTC)", "tokens/s (Σ ranks)",
                         yaxis2={"title": {"text": "MFU (%)"}, "overlaying": "y", "side": "right",
                                 "rangemode": "tozero", "showgrid": False})}
    fig["layout"]["xaxis"]["type"] = "date"
    _mark_incidents(fig, spans, max(tps) * 1.05)
    return fig


def step_time(series: Sequence[tuple[Any, ...]], scope: str, spans: list[tuple[int, int, str]],
              expected_ms: float | None = None, expected_label: str = "expected") -> Figure:
    """Step-time p50 / p90 / p99 (ms) over time, incidents marked; with `expected_ms` (the fleet's reference
    models' expectation of the job's typical step) a dashed level across the range, to read the gap at a glance."""
    title = f"Step time percentiles ({scope})"
    if not series:
        return _empty(title)
    x = [iso(int(r[0])) for r in series]
    colors = {"p50": "#2ca02c", "p90": "#9467bd", "p99": "#d62728"}
    if all(int(r[7]) == int(r[8]) >= 0 for r in series):  # one step per point: its percentiles are its time
        colors = {"step time": "#2ca02c"}
    data = [{"type": "scatter", "mode": "lines", "name": name, "x": x, "line": {"color": colors[name], "width": 1.5},
             "y": [round(float(r[4 + i]), 2) for r in series],
             "hovertemplate": f"%{{x}}<br>{name} %{{y:,.1f}} ms<extra></extra>"}
            for i, name in enumerate(colors)]
    top = max(float(r[6]) for r in series)
    if expected_ms is not None and math.isfinite(expected_ms) and expected_ms > 0:
        ends = [x[0], iso(int(series[-1][1]))]
        data.append({"type": "scatter", "mode": "lines", "name": _text(expected_label), "x": ends,
                     "y": [round(expected_ms, 2)] * 2, "line": {"color": "#555", "width": 1.5, "dash": "dash"},
                     "hovertemplate": f"{_text(expected_label)} %{{y:,.1f}} ms<extra></extra>"})
        top = max(top, expected_ms)
    fig: Figure = {"data": data, "layout": _layout(title, "time (UTC)", "step time (ms)")}
    fig["layout"]["xaxis"]["type"] = "date"
    _mark_incidents(fig, spans, top * 1.05)
    return fig


def distribution(step_times: Sequence[float], job: str) -> Figure:
    title = f"Step-time distribution (job {_text(job)})"
    if not step_times:
        return _empty(title)
    return {"data": [{"type": "histogram", "x": [round(v, 2) for v in step_times], "name": "steps",
                      "marker": {"color": "#2ca02c"}, "nbinsx": 60,
                      "hovertemplate": "%{x} ms<br>%{y} steps<extra></extra>"}],
            "layout": _layout(title, "step time (ms, the slowest rank's)", "steps", bargap=0.05)}


def bar_color(ratio: float) -> str:
    """A bar's colour from its ratio to the median: blue up to 1.05x, then light to dark red at HEAT_MAX.

    Computed here: plotly.js 3 warns on a numeric bar colour array ("Invalid color specifier").
    """
    if ratio < 1.05:
        return "#9ecae1"
    f = min(1.0, (ratio - 1.05) / (HEAT_MAX - 1.05))
    lo, hi = (0xfc, 0xbb, 0xa1), (0x67, 0x00, 0x0d)
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi, strict=True))


def offenders(result: Result | None, what: str) -> Figure:
    """The slowest ranks or hosts as bars of mean busy time, the median drawn as a dashed line."""
    title = f"Slowest {what}s"
    if result is None or not result.rows:
        return _empty(title)
    recs = list(reversed(result.records()))  # slowest on top
    labels = ([f"rank {r['rank']} · {_text(r['host'])}" for r in recs] if what == "rank"
              else [f"{_text(r['host'])} ({r['ranks']} ranks)" for r in recs])
    busy = [float(r["busy_ms"]) for r in recs]
    ratio = [float(r["vs_median"]) for r in recs]
    median = next((b / v for b, v in zip(busy, ratio, strict=True) if v > 0), 0.0)
    fig: Figure = {"data": [{
        "type": "bar", "orientation": "h", "name": f"{what}s", "x": [round(b, 2) for b in busy], "y": labels,
        "customdata": ratio, "marker": {"color": [bar_color(v) for v in ratio]},
        "hovertemplate": "%{y}<br>%{x:,.1f} ms busy<br>%{customdata:.2f}× the median<extra></extra>",
    }], "layout": _layout(title, "mean busy time per step (ms; step − exposed communication)", "",
                          height=max(260, 22 * len(recs) + 100),
                          showlegend=False)}
    fig["layout"]["yaxis"] = {"type": "category", "automargin": True}
    fig["layout"]["xaxis"]["rangemode"] = "tozero"
    if median > 0:
        fig["layout"]["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": median, "x1": median,
                                    "y0": 0, "y1": 1, "line": {"color": "#444", "dash": "dash", "width": 1}}]
        fig["layout"]["annotations"] = [{"text": f"median {what} {median:,.1f} ms", "x": median, "xref": "x",
                                         "y": 1.0, "yref": "paper", "yanchor": "bottom", "showarrow": False,
                                         "font": {"size": 11}}]
    return fig


def _span_label(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}–{hi}"


def heatmap(heat: HeatMap | None, job: str) -> Figure:
    """Rank bins (rows, rank 0 on top) x step bins (columns): colour = the bin's max busy / the column median.

    Categorical axes labelled with each bin's rank and step range, so the hover names the
    ranges and a box zoom keeps them; the customdata carries the slowest rank and its time.
    """
    title = f"Rank × step slowness (job {_text(job)})"
    if heat is None or not heat.max_ms:
        return _empty(title)
    b = heat.bins
    last_rank, last_step = b.world - 1, b.step_first + b.steps - 1
    ys = [_span_label(i * b.rank_bin, min(last_rank, (i + 1) * b.rank_bin - 1)) for i in range(b.rank_bins)]
    xs = [_span_label(b.step_first + j * b.step_bin, min(last_step, b.step_first + (j + 1) * b.step_bin - 1))
          for j in range(b.step_bins)]
    custom = [[[w if w is not None else -1, round(m, 1) if m is not None else None]
               for w, m in zip(wr, mr, strict=True)] for wr, mr in zip(heat.worst, heat.max_ms, strict=True)]
    sampled = f", 1 step in {b.stride} read" if b.stride > 1 else ""
    bin_note = f"{b.rank_bin} rank(s) × {b.step_bin} step(s) per cell{sampled}"
    fig: Figure = {"data": [{
        "type": "heatmap", "x": xs, "y": ys, "z": heat.ratio, "customdata": custom, "zmin": HEAT_MIN,
        "zmax": HEAT_MAX, "colorscale": HEAT_SCALE, "hoverongaps": False, "xgap": 0, "ygap": 0,
        "colorbar": {"title": {"text": "max ÷ median", "side": "right"}, "ticksuffix": "×"},
        "hovertemplate": ("ranks %{y}, steps %{x}<br>slowest rank %{customdata[0]}: %{customdata[1]:,.1f} ms busy"
                          "<br>%{z:.2f}× the median rank<extra></extra>"),
    }], "layout": _layout(f"{title}: {bin_note}", "step", "rank", height=600)}
    fig["layout"]["xaxis"].update({"type": "category", "nticks": 12, "showgrid": False})
    fig["layout"]["yaxis"] = {"title": {"text": "rank"}, "type": "category", "autorange": "reversed",
                              "nticks": 16, "showgrid": False, "automargin": True}
    return fig


def incident_timeline(incidents: Result | None) -> Figure:
    """Every incident at its detection time, one row per rule, coloured by severity."""
    title = "Incidents by rule"
    if incidents is None or not incidents.rows:
        return _empty(title)
    recs = incidents.records()
    colors = {"critical": "#67000d", "warning": "#de2d26", "info": "#fc9272"}
    data = []
    for severity in sorted({str(r["severity"]) for r in recs}):
        rows = [r for r in recs if str(r["severity"]) == severity]
        spans = incident_spans(Result(incidents.name, incidents.columns,
                                      [tuple(r.values()) for r in rows]), [])
        data.append({
            "type": "scatter", "mode": "markers", "name": _text(severity),
            "x": [iso(s) for s, _, _ in spans], "y": [_text(r["rule"]) for r in rows],
            "text": [t for _, _, t in spans], "hovertemplate": "%{text}<extra></extra>",
            "marker": {"size": 10, "color": colors.get(severity, "#7f7f7f"), "symbol": "diamond"},
        })
    fig: Figure = {"data": data, "layout": _layout(title, "detected (UTC)", "rule", height=300)}
    fig["layout"]["xaxis"]["type"] = "date"
    fig["layout"]["yaxis"] = {"type": "category", "automargin": True, "title": {"text": "rule"}}
    return fig
