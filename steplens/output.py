"""Print query results as an aligned table, JSON (one object per row, orjson) or CSV."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Sequence
from typing import Any, TextIO

import orjson

FORMATS = ("table", "json", "csv")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def write(out: TextIO, fmt: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if fmt == "json":
        records = [dict(zip(columns, row, strict=True)) for row in rows]
        out.write(orjson.dumps(records, option=orjson.OPT_INDENT_2 | orjson.OPT_NAIVE_UTC).decode() + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_text(v) for v in row] for row in rows)
    else:
        cells = [[_text(v) for v in row] for row in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
        for r in cells:
            out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")
