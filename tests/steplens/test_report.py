"""The capacity report: self-contained HTML whose SVG plots render in headless Chromium, no console errors."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from sinks.backend import Backend
from steplens.cli import EXIT_OK, main
from tests.steplens import chromium
from tests.steplens.fleet_data import Truth

REPO = Path(__file__).resolve().parents[2]
KINDS = {"line", "histogram", "heatmap", "timeline"}

# Page-side check, added to a copy of the report: measures every plot as rendered and writes
# the verdict into the DOM, which --dump-dom returns.
CHECK = """<script>
window.addEventListener('load', () => {
  const plots = [...document.querySelectorAll('svg.plot')].map(svg => {
    const box = svg.getBoundingClientRect();
    const marks = svg.querySelectorAll('circle.point, rect.bar, rect.cell, circle.mark');
    let drawn = 0;
    marks.forEach(m => { const b = m.getBBox(); if (b.width > 0 || b.height > 0) drawn++; });
    return {kind: svg.dataset.kind, w: box.width, h: box.height, marks: marks.length, drawn: drawn};
  });
  const pre = document.createElement('pre'); pre.id = 'plot-check';
  pre.textContent = JSON.stringify(plots); document.body.appendChild(pre);
});
</script>"""


@pytest.fixture
def report(fleet: tuple[Backend, Truth], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "capacity.html"
    assert main(["report", "--job", "job-a", "-o", str(out)]) == EXIT_OK
    progress = capsys.readouterr().err
    assert "[1/" in progress and "heat map" in progress  # long queries announce themselves
    return out


def test_report_is_self_contained(report: Path) -> None:
    html = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing from the network
    assert "<script" not in html  # plots are inline SVG, no JavaScript at all
    for section in ("Throughput over time", "MFU over time", "Step-time distribution", "Rank × step slowness",
                    "Top offenders", "Incident timeline", "Device-hours lost", "Device health"):
        assert section in html


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import orjson

    checked = tmp_path / "checked.html"
    checked.write_text(report.read_text().replace("</body>", CHECK + "</body>"))
    result = chromium.run(checked, tmp_path / "profile-dom", "--dump-dom", "--virtual-time-budget=5000")
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'<pre id="plot-check">(.*?)</pre>', result.stdout, re.S)
    assert match is not None, result.stdout[-2000:]
    plots = orjson.loads(match.group(1).replace("&quot;", '"'))
    assert {p["kind"] for p in plots} == KINDS  # no plot fell back to "no data"
    for plot in plots:
        assert plot["w"] > 100 and plot["h"] > 100, plot
        assert plot["marks"] > 0 and plot["drawn"] == plot["marks"], plot
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console

    shot = tmp_path / "report.png"
    result = chromium.run(report, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1100,2200",
                          "--hide-scrollbars")
    assert result.returncode == 0 and shot.stat().st_size > 10_000, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if "embedded" in request.node.name and os.environ.get("STEPLENS_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "report-screenshot.png")  # the README's picture, on request only
