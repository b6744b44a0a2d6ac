"""The capacity report: one self-contained HTML file whose plotly charts all render in headless Chromium.

Checked in the page itself (a script added to a copy of the report, its verdict written into
the DOM that --dump-dom returns): every chart's plotly SVG is there and sized, each drew its
traces (the heat map its image), and no error reached the console or window.onerror.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from sinks.backend import Backend
from sinks.embedded import EmbeddedBackend
from steplens.cli import EXIT_OK, main
from steplens.report_html.page import plotly_js
from tests.steplens import chromium, sim_job
from tests.steplens.fleet_data import Truth

REPO = Path(__file__).resolve().parents[2]
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND"  # any fetch fails, and a failed fetch logs a console error
CHARTS = ("throughput", "step-time", "step-distribution", "incident-timeline", "heatmap", "slowest-ranks",
          "slowest-hosts")

CHECK = """<script>
window.CHECK_ERRORS = [];
window.addEventListener('error', e => window.CHECK_ERRORS.push(String(e.message)));
window.addEventListener('load', () => window.REPORT_READY.then(() => {
  const charts = [...document.querySelectorAll('div.chart')].map(div => {
    const svg = div.querySelector('.js-plotly-plot .main-svg');
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const image = div.querySelector('.heatmaplayer image');
    return {id: div.id, svg: !!svg, w: box.width, h: box.height,
            traces: div.querySelectorAll('.trace, .hm').length, marks: div.querySelectorAll('.point, .js-line').length,
            image: image ? image.getBBox().width * image.getBBox().height : 0,
            empty: (div.textContent || '').includes('no data in this range')};
  });
  // hover the heat map's slowest cell, as a person would, and read the tooltip
  const hm = document.getElementById('heatmap');
  const report = hover => {
    const pre = document.createElement('pre'); pre.id = 'chart-check';
    pre.textContent = JSON.stringify({charts: charts, errors: window.CHECK_ERRORS, hover: hover});
    document.body.appendChild(pre);
  };
  if (!(hm.data && hm.data[0] && hm.data[0].z)) { report(''); return; }
  let best = [0, 0], top = -1;
  hm.data[0].z.forEach((row, i) => row.forEach((v, j) => { if (v !== null && v > top) { top = v; best = [i, j]; } }));
  Plotly.Fx.hover(hm, {xval: best[1], yval: best[0]});  // category axes: values are indices
  let frames = 0;  // plotly draws the tooltip a little later (virtual time: no real wait)
  const read = () => {
    const text = hm.querySelector('.hoverlayer').textContent;
    if (text || ++frames > 60) { report(text); } else { setTimeout(read, 20); }
  };
  read();
}, err => { window.CHECK_ERRORS.push('plot failed: ' + err); }));
</script>"""


def assert_self_contained(html: str) -> None:
    """Nothing fetched: plotly.js inlined once, no script, style or image from anywhere else.

    plotly.js itself holds URLs (map tile servers, its logo link) that these charts never
    use; the page around it holds none, and Chromium runs it with every host unresolvable.
    """
    assert html.count(plotly_js()) == 1
    page = html.replace(plotly_js(), "")
    assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)\s*=""", page, re.I)
    assert not re.search(r"""(https?:)?//[a-z0-9.-]+\.[a-z]{2,}""", page, re.I)
    assert page.count("<script") == 2  # the library, then the figures


def check_in_chromium(report: Path, tmp_path: Path) -> dict[str, Any]:
    """Load a copy of `report` with CHECK added; the page's verdict as a dict."""
    checked = tmp_path / "checked.html"
    checked.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    result = chromium.run(checked, tmp_path / "profile-dom", "--dump-dom", "--virtual-time-budget=20000", OFFLINE)
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'<pre id="chart-check">(.*?)</pre>', result.stdout, re.S)
    assert match is not None, result.stderr[-2000:]
    verdict: dict[str, Any] = orjson.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert verdict["errors"] == [], verdict["errors"]
    return verdict


def assert_charts_drawn(verdict: dict[str, Any]) -> None:
    charts = {c["id"]: c for c in verdict["charts"]}
    assert tuple(charts) == CHARTS
    for chart in charts.values():
        assert chart["svg"] and chart["w"] > 300 and chart["h"] > 200, chart
        assert not chart["empty"] and chart["traces"] > 0, chart  # no chart fell back to "no data"
    assert charts["heatmap"]["image"] > 10_000, charts["heatmap"]  # the heat map is drawn as one image
    for name in ("throughput", "slowest-ranks", "step-distribution"):
        assert charts[name]["marks"] > 0, charts[name]


def screenshot(report: Path, tmp_path: Path) -> Path:
    shot = tmp_path / "report.png"
    result = chromium.run(report, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1400,2600",
                          "--hide-scrollbars", "--virtual-time-budget=20000", OFFLINE)
    assert result.returncode == 0 and shot.stat().st_size > 50_000, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return shot


@pytest.fixture
def report(fleet: tuple[Backend, Truth], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "capacity.html"
    assert main(["report", "--job", "job-a", "-o", str(out)]) == EXIT_OK
    progress = capsys.readouterr().err
    # not a terminal: one plain line per query, the heat map's included (no bar, no carriage return)
    assert "report: 1/11 queries (9 %)" in progress and "heat map" in progress and "\r" not in progress
    return out


def test_report_is_self_contained(report: Path) -> None:
    html = report.read_text()
    assert_self_contained(html)
    for section in ("Throughput over time", "Step times and slowness", "Top offenders", "Device-hours lost",
                    "Device health", "Incidents"):
        assert section in html


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    assert_charts_drawn(check_in_chromium(report, tmp_path))
    screenshot(report, tmp_path)


def test_a_1024_rank_job_renders_and_is_screenshot(
    embedded_backend: EmbeddedBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The acceptance picture: the simulator's 1,024-rank job, its incidents found by the engine.

    The screenshot goes to docs/report.png only with STEPLENS_UPDATE_SCREENSHOT=1 (a test run
    never rewrites tracked files).
    """
    found = sim_job.load(embedded_backend)
    assert {i.rule for i in found} >= {"SLOW_RANK", "SLOW_STEP"}
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_DATABASE", embedded_backend.database)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
    monkeypatch.setenv("STEPLENS_CHDB_PATH", str(embedded_backend.path))
    out = tmp_path / "sim.html"
    assert main(["report", "--job", sim_job.JOB, "-o", str(out)]) == EXIT_OK
    html = out.read_text()
    assert_self_contained(html)
    verdict = check_in_chromium(out, tmp_path)
    assert_charts_drawn(verdict)
    # the hottest cell's tooltip names the straggler, its bin's rank range and its step
    assert f"slowest rank {sim_job.SLOW_RANK}:" in verdict["hover"] and "ranks 612–613" in verdict["hover"], verdict
    shot = screenshot(out, tmp_path)
    if os.environ.get("STEPLENS_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "report.png")
