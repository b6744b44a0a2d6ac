"""The capacity report as one self-contained HTML file: inline SVG drawn here, nothing fetched."""

from steplens.report_html.page import render

__all__ = ["render"]
