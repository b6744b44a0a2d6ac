"""The capacity report as one self-contained HTML file: plotly charts with plotly.js inlined, nothing fetched."""

from steplens.report_html.page import render, write

__all__ = ["render", "write"]
