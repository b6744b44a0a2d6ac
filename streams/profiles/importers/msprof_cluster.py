"""msprof-analyze `cluster` outputs (`cluster_analysis_output/`), so its users bring what they have.

- `cluster_step_trace_time.csv`: Step, Type (rank | stage), Index, then the step_trace_time
  columns of each rank (Computing, Communication(Not Overlapped), Overlapped, Communication,
  Free, Stage, Bubble, ...), optionally DP/PP/TP Index. Unknown columns are kept as numbers.
- `cluster_communication.json`: nested by communication group, step, op and rank down to
  objects holding `Communication Time Info` (and `Communication Bandwidth Info`); flattened
  to one row per (group, step, op, rank) whatever the nesting depth.
- `communication_group.json`: lists of rank groups (`collective`, `p2p`) and, in newer versions,
  `comm_group_parallel_info`.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import orjson

from streams.profiles.jsonstream import TraceFormatError, open_trace
from streams.profiles.model import ClusterTable

FILES = ("cluster_step_trace_time.csv", "cluster_communication.json", "communication_group.json")
STEP_CSV_COLUMNS = frozenset(("Step", "Type", "Index", "Computing"))


def is_cluster_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in FILES)


SNIFF_BYTES = 1 << 16
# what a renamed file's first 64 KB show: the communication table's per-op record, the group file's keys
_COMM_MARK = b'"Communication Time Info"'
_GROUP_KEYS = frozenset(("collective", "p2p", "comm_group_parallel_info"))


def cluster_file_kind(path: Path) -> str | None:
    """Which msprof-analyze output a file is (its canonical name in FILES), by name or else by content:
    users rename `cluster_step_trace_time.csv` and `cluster_communication.json` when they collect
    several runs, and a renamed file is still the same table. None: not one of them."""
    if not path.is_file():
        return None
    if path.name in FILES:
        return path.name
    with open_trace(path) as fh:
        head = fh.read(SNIFF_BYTES)
    text = head.lstrip()
    if text.startswith((b"{", b"[")):
        if _COMM_MARK in head:
            return "cluster_communication.json"
        if text.startswith(b"{") and b'"traceEvents"' not in head:
            try:
                doc = orjson.loads(head) if len(head) < SNIFF_BYTES else None
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and doc and set(doc) <= _GROUP_KEYS:
                return "communication_group.json"
        return None
    first = head.decode("utf-8-sig", errors="replace").splitlines()[:1]
    header = next(csv.reader(first), []) if first else []
    return FILES[0] if {h.strip() for h in header} >= STEP_CSV_COLUMNS else None


def is_cluster_file(path: Path) -> bool:
    """One msprof-analyze output passed on its own, under any name (`cluster_file_kind`)."""
    return cluster_file_kind(path) is not None


def _num(value: str) -> Any:
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _flatten(node: Any, keys: list[str], out: list[dict[str, Any]]) -> None:
    if not isinstance(node, dict):
        return
    if "Communication Time Info" in node:
        info = node.get("Communication Time Info") or {}
        row: dict[str, Any] = {"path": list(keys)}
        for key, value in info.items():
            if isinstance(value, int | float):
                row[key] = float(value)
        bw = node.get("Communication Bandwidth Info") or {}
        for transport, stats in bw.items():
            if isinstance(stats, dict):
                row[f"{transport} Transit Size(MB)"] = float(stats.get("Transit Size(MB)", 0) or 0)
                row[f"{transport} Bandwidth(GB/s)"] = float(stats.get("Bandwidth(GB/s)", 0) or 0)
        out.append(row)
        return
    for key, child in node.items():
        _flatten(child, [*keys, str(key)], out)


def _rank_of(path: list[str]) -> int:
    for key in reversed(path):
        if key.isdigit():
            return int(key)
    return -1


def parse_cluster(root: Path) -> ClusterTable:
    """A `cluster_analysis_output` folder, or one of its files on its own."""
    if root.is_file():
        kind = cluster_file_kind(root)
        if kind is None:
            raise TraceFormatError(f"{root}: not an msprof-analyze output ({', '.join(FILES)})")
        return _parse_files(root, {kind: root})
    if not is_cluster_dir(root):
        raise TraceFormatError(f"{root}: none of {', '.join(FILES)}")
    return _parse_files(root, {f: root / f for f in FILES if (root / f).is_file()})


def _parse_files(source: Path, files: dict[str, Path]) -> ClusterTable:
    table = ClusterTable(source=str(source))
    step_csv = files.get("cluster_step_trace_time.csv")
    if step_csv is not None:
        with step_csv.open(newline="", encoding="utf-8-sig") as fh:
            for row in csv.DictReader(fh):
                table.steps.append({k.strip(): _num(v or "") for k, v in row.items() if k is not None})
    comm = files.get("cluster_communication.json")
    if comm is not None:
        rows: list[dict[str, Any]] = []
        _flatten(orjson.loads(comm.read_bytes()), [], rows)
        for row in rows:
            path = row["path"]
            row["rank"] = _rank_of(path)
            row["op"] = next((k for k in reversed(path) if not k.isdigit() and k != "collective" and k != "p2p"), "")
            row["group"] = path[0] if path else ""
            row.setdefault("Elapse Time(ms)", math.nan)
        table.collectives = rows
    groups = files.get("communication_group.json")
    if groups is not None:
        data = orjson.loads(groups.read_bytes())
        if isinstance(data, dict):
            for kind in ("collective", "p2p"):
                for ranks in data.get(kind) or []:
                    table.groups.append({"kind": kind, "ranks": [int(r) for r in ranks]})
            for info in data.get("comm_group_parallel_info") or []:
                if isinstance(info, dict):
                    table.groups.append({"kind": "parallel_info", **info})
    return table
