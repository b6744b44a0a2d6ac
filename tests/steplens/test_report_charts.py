"""The report's pure parts: heat-map binning and grid, incident spans, the plotly figure specs, script-safe JSON."""

from __future__ import annotations

import datetime as dt

import orjson

from steplens.queries.base import Result, TimeRange
from steplens.queries.fleet import incident_history
from steplens.queries.report import SERIES_COLUMNS, HeatBins, ReportData, heat_bins, heat_grid
from steplens.report_html import charts
from steplens.report_html.page import figures, render, script_json

T0 = 1_795_000_000_000_000_000
INCIDENT_COLUMNS = incident_history().columns


def test_bins_stay_within_the_caps_at_10240_ranks() -> None:
    bins = heat_bins(10_240, 0, 99_999, max_rows=10**12)
    assert (bins.rank_bin, bins.step_bin, bins.stride) == (20, 100, 1)
    assert (bins.rank_bins, bins.step_bins) == (512, 1000)
    small = heat_bins(16, 5, 44)
    assert (small.rank_bin, small.step_bin, small.stride, small.rank_bins, small.step_bins) == (1, 1, 1, 16, 40)


def test_a_huge_range_is_sampled_with_a_stride_that_divides_each_column() -> None:
    bins = heat_bins(10_240, 0, 3_599, max_rows=8_000_000)  # an hour of steps: 36.9 M rows
    assert bins.stride == 5 and bins.step_bin % bins.stride == 0
    assert bins.step_bins <= 1000 and bins.rank_bins <= 512
    assert 10_240 * bins.steps / bins.stride <= 8_000_000
    default = heat_bins(10_240, 0, 3_599)  # 2 M rows read at most: within the 2 s ad hoc target
    assert (default.stride, default.step_bin, default.step_bins) == (19, 19, 190)
    assert heat_bins(1024, 0, 119).stride == 1  # the 1,024-rank test job is read whole


def test_the_grid_compares_each_cell_max_with_its_column_median_and_keeps_gaps() -> None:
    bins = HeatBins(world=6, step_first=10, steps=4, rank_bin=2, step_bin=2, stride=1)
    rows = [  # (rank bin, step bin, max busy, slowest rank, median busy)
        (0, 0, 100.0, 1, 100.0), (1, 0, 150.0, 3, 100.0), (2, 0, 100.0, 4, 98.0),
        (0, 1, 200.0, 0, 200.0), (1, 1, 200.0, 2, 200.0),  # rank bin 2 sent nothing for steps 12-13
    ]
    heat = heat_grid(rows, bins)
    assert heat.ratio == [[1.0, 1.0], [1.5, 1.0], [1.0, None]]
    assert heat.worst == [[1, 0], [3, 2], [4, None]]
    assert heat.max_ms[1][0] == 150.0


def _series(n: int) -> list[tuple[int, ...]]:
    """n one-step buckets of 1 s from T0 (SERIES_COLUMNS)."""
    return [(T0 + i * 10**9, T0 + (i + 1) * 10**9, 1000.0, 0.4, 500.0, 600.0, 700.0, i, i) for i in range(n)]


def _incident(rule: str, first: int, last: int, summary: str = "slow") -> tuple[object, ...]:
    detected = dt.datetime.fromtimestamp((T0 + last * 10**9) // 10**9, dt.UTC).replace(tzinfo=None)
    return (detected, "j", rule, "resolved", "warning", "job", "", [], first, last, summary, f"{rule}-{first}",
            "a cause", "a suggestion")


def test_incidents_span_their_steps_time_on_the_series() -> None:
    incidents = Result("incidents", INCIDENT_COLUMNS, [_incident("SLOW_STEP", 30, 32)])
    ((start, end, text),) = charts.incident_spans(incidents, _series(100))
    assert (start, end) == (T0 + 30 * 10**9, T0 + 33 * 10**9)
    assert "SLOW_STEP" in text and "steps 30–32" in text


def test_the_throughput_chart_has_a_time_axis_units_and_marked_incidents() -> None:
    series = _series(100)
    incidents = Result("incidents", INCIDENT_COLUMNS, [_incident("SLOW_STEP", 30, 32),
                                                       _incident("SLOW_RANK", 1, 99)])
    fig = charts.throughput(series, "job j, per step", charts.incident_spans(incidents, series))
    layout = fig["layout"]
    assert layout["xaxis"]["type"] == "date" and layout["xaxis"]["title"]["text"] == "time (UTC)"
    assert "tokens/s" in layout["yaxis"]["title"]["text"] and layout["yaxis2"]["title"]["text"] == "MFU (%)"
    assert [t["name"] for t in fig["data"]] == ["tokens/s", "MFU", "incidents"]
    assert fig["data"][0]["x"][0] == charts.iso(T0) and fig["data"][1]["y"][0] == 40.0  # MFU in percent
    # the short slow period is a band over its steps; the straggler all along only a line (a band would cover all)
    assert [s["type"] for s in layout["shapes"]] == ["rect", "line"]
    assert layout["shapes"][0]["x0"] == charts.iso(T0 + 30 * 10**9)


def test_percentiles_collapse_to_one_line_when_a_point_is_one_step() -> None:
    assert [t["name"] for t in charts.step_time(_series(5), "s", [])["data"]] == ["step time"]
    minutes = [(*row[:7], -1, -1) for row in _series(5)]
    assert [t["name"] for t in charts.step_time(minutes, "s", [])["data"]] == ["p50", "p90", "p99"]


def test_the_heatmap_labels_bins_with_their_rank_and_step_ranges() -> None:
    bins = HeatBins(world=5, step_first=100, steps=3, rank_bin=2, step_bin=2, stride=1)
    heat = heat_grid([(0, 0, 1.0, 1, 1.0), (2, 1, 2.0, 4, 1.0)], bins)
    (trace,) = charts.heatmap(heat, "j")["data"]
    assert trace["y"] == ["0–1", "2–3", "4"] and trace["x"] == ["100–101", "102"]
    assert trace["customdata"][2][1] == [4, 2.0] and trace["customdata"][0][1] == [-1, None]
    assert "ranks %{y}" in trace["hovertemplate"] and "slowest rank %{customdata[0]}" in trace["hovertemplate"]


def test_a_sampled_heatmap_says_so_in_its_title() -> None:
    bins = heat_bins(10_240, 0, 3_599)
    heat = heat_grid([(0, 0, 1.0, 1, 1.0)], bins)
    title = charts.heatmap(heat, "j")["layout"]["title"]["text"]
    assert "20 rank(s) × 19 step(s) per cell, 1 step in 19 read" in title


def test_offender_bars_are_coloured_by_their_ratio_to_the_median() -> None:
    result = Result("slowest-ranks", ("rank", "host", "steps", "busy_ms", "step_ms", "max_ms", "vs_median"),
                    [(5, "h1", 40, 650.0, 700.0, 720.0, 1.3), (2, "h0", 40, 500.0, 700.0, 710.0, 1.0)])
    (trace,) = charts.offenders(result, "rank")["data"]
    assert trace["y"] == ["rank 2 · h0", "rank 5 · h1"]  # slowest on top (plotly draws bottom-up)
    assert trace["marker"]["color"][0] == "#9ecae1" and trace["marker"]["color"][1] != "#9ecae1"
    assert charts.bar_color(1.5) == "#67000d" and charts.bar_color(9.0) == "#67000d"


def test_an_empty_report_still_draws_every_chart_saying_so() -> None:
    figs = figures(ReportData("t", "j", TimeRange()))
    assert set(figs) == {"throughput", "step-time", "step-distribution", "heatmap", "slowest-ranks",
                         "slowest-hosts", "incident-timeline"}
    for fig in figs.values():
        assert fig["data"] == [] and "no data" in fig["layout"]["annotations"][0]["text"]


def test_data_strings_cannot_close_the_script_or_become_markup() -> None:
    hostile = "</script><script>alert(1)</script><!--"
    assert "<" not in script_json({"s": hostile}) and orjson.loads(script_json({"s": hostile})) == {"s": hostile}
    data = ReportData("t", "j", TimeRange(), series=_series(3), series_scope="job j, per step")
    data.tables["incidents"] = Result("incidents", INCIDENT_COLUMNS, [_incident("SLOW_STEP", 1, 1, hostile)])
    page = render(data, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    tail = page[page.rindex("<script>"):]
    assert "alert" in tail and "<script>alert" not in tail and "</script><script>" not in tail
    assert "&lt;/script&gt;" in tail  # escaped for plotly's HTML-ish hover text too


def test_series_columns_are_what_the_charts_index() -> None:
    assert SERIES_COLUMNS.index("t0_ns") == 0 and SERIES_COLUMNS.index("p99_ms") == 6
    assert SERIES_COLUMNS.index("step_first") == 7 and SERIES_COLUMNS.index("step_last") == 8
