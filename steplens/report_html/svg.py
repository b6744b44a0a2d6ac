"""Minimal SVG plots (line, histogram, heat map): no plotting library, nothing loaded from the network."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

W, H, PAD = 720, 240, 44


def _frame(title: str, body: str, kind: str) -> str:
    return (
        f'<svg class="plot" data-kind="{kind}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img"><title>{escape(title)}</title>'
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/>{body}</svg>'
    )


def _axis(lo: float, hi: float, label: str) -> str:
    return (
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" stroke="#444"/>'
        f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>'
        f'<text x="4" y="16" font-size="10">{hi:.3g}</text><text x="4" y="{H - PAD}" font-size="10">{lo:.3g}</text>'
        f'<text x="{PAD}" y="{H - 8}" font-size="11">{escape(label)}</text>'
    )


def empty(title: str) -> str:
    return _frame(title, f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text>', "empty")


def line(title: str, ys: Sequence[float], label: str, color: str = "#1f77b4") -> str:
    values = [y for y in ys if not math.isnan(y)]
    if not values:
        return empty(title)
    lo, hi = min(0.0, *values), max(values) or 1.0
    n = max(len(ys) - 1, 1)
    xy = [
        (PAD + (W - PAD - 10) * i / n, H - PAD - (H - PAD - 10) * (y - lo) / (hi - lo or 1))
        for i, y in enumerate(ys) if not math.isnan(y)
    ]
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    poly = f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'
    step = max(1, len(xy) // 200)  # point markers: a single point still shows, long series stay light
    dots = "".join(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}"/>' for x, y in xy[::step])
    body = _axis(lo, hi, label) + poly + dots
    return _frame(title, body, "line")


def histogram(title: str, values: Sequence[float], label: str, bins: int = 40) -> str:
    if not values:
        return empty(title)
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    top = max(counts)
    bw = (W - PAD - 10) / bins
    bars = "".join(
        f'<rect class="bar" x="{PAD + i * bw:.1f}" y="{H - PAD - (H - PAD - 10) * c / top:.1f}" '
        f'width="{bw - 1:.1f}" height="{(H - PAD - 10) * c / top:.1f}" fill="#2ca02c"><title>{c}</title></rect>'
        for i, c in enumerate(counts)
    )
    return _frame(title, _axis(0, top, f"{label}: {lo:.1f} .. {hi:.1f}") + bars, "histogram")


def heatmap(title: str, grid: Sequence[Sequence[float]], label: str) -> str:
    """Rows = rank bins (top to bottom), columns = step bins; 1.0 = the bin's median, red = slower."""
    if not grid or not grid[0]:
        return empty(title)
    nr, nc = len(grid), len(grid[0])
    cw, ch = (W - PAD - 10) / nc, (H - PAD - 10) / nr
    cells = []
    for r, row in enumerate(grid):
        for c, v in enumerate(row):
            if math.isnan(v):
                continue
            heat = max(0.0, min(1.0, (v - 1.0) / 0.3))  # 1.3x the median and above: full red
            color = f"rgb({int(225 + 30 * heat)},{int(232 * (1 - heat))},{int(245 * (1 - heat))})"
            cells.append(f'<rect class="cell" x="{PAD + c * cw:.1f}" y="{10 + r * ch:.1f}" width="{cw + 0.5:.1f}" '
                         f'height="{ch + 0.5:.1f}" fill="{color}"><title>{v:.2f}</title></rect>')
    return _frame(title, _axis(0, nr, label) + "".join(cells), "heatmap")


def timeline(title: str, points: Sequence[tuple[float, str, str]], label: str) -> str:
    """Instant markers: (epoch seconds, row label, tooltip); one row per distinct label."""
    if not points:
        return empty(title)
    rows = sorted({p[1] for p in points})
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    span = (t1 - t0) or 1.0
    rh = (H - PAD - 10) / len(rows)
    marks = "".join(
        f'<circle class="mark" cx="{PAD + (W - PAD - 20) * (t - t0) / span + 5:.1f}" '
        f'cy="{10 + rh * (rows.index(row) + 0.5):.1f}" r="4" fill="#d62728"><title>{escape(tip)}</title></circle>'
        for t, row, tip in points
    )
    names = "".join(f'<text x="{PAD + 4}" y="{10 + rh * (i + 0.5) - 6:.1f}" font-size="10">{escape(r)}</text>'
                    for i, r in enumerate(rows))
    return _frame(title, _axis(0, len(rows), label) + names + marks, "timeline")
