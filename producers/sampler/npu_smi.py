"""Parser for `npu-smi info watch` (Ascend): one table row per chip per tick -> T1–T7.

The tool prints a header line naming the columns with their units, e.g.

    NpuID(Idx)  ChipId(Idx) Pwr(W)  Temp(C)  AI Core(%)  AI Cpu(%)  Ctrl Cpu(%)  Memory(%)  Memory BW(%)

then one whitespace-separated row per chip, repeating the header from time to time. Which
columns appear depends on the version and on `-s` (watch type), so the parser is driven by the
header it saw last; unknown columns are ignored and "NA"/"-" read as not available.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# header name (lower-case, no spaces, no unit) -> DeviceSample field
COLUMNS: dict[str, str] = {
    "npuid": "npu", "chipid": "chip", "pwr": "power_w", "power": "power_w", "temp": "temp_c",
    "temperature": "temp_c", "aicore": "aicore_pct", "aicpu": "aicpu_pct", "ctrlcpu": "ctrlcpu_pct",
    "memory": "mem_pct", "hbm": "mem_pct", "memorybw": "membw_pct", "memorybandwidth": "membw_pct",
    "hbmbw": "membw_pct", "aicorefreq": "freq_mhz", "freq": "freq_mhz",
}
_HEADER_CELL = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*\(([^)]*)\)")


@dataclass(frozen=True, slots=True)
class NpuReading:
    """One row: which chip and its metrics (None = not reported)."""

    npu: int
    chip: int
    values: dict[str, float | None]

    def device_index(self, chips_per_npu: int = 1) -> int:
        return self.npu * chips_per_npu + self.chip


def parse_header(line: str) -> list[str | None] | None:
    """Field per column of a header line, or None when the line is not a header."""
    cells = _HEADER_CELL.findall(line)
    if not cells or "npuid" not in cells[0][0].replace(" ", "").lower():
        return None
    return [COLUMNS.get(name.replace(" ", "").lower()) for name, _unit in cells]


def _number(token: str) -> float | None:
    if token.upper() in ("NA", "N/A", "-", "--"):
        return None
    try:
        return float(token)
    except ValueError:
        return None


def parse_watch(lines: Iterable[str]) -> Iterator[NpuReading]:
    """Readings from `npu-smi info watch` output lines (a stream or a captured text)."""
    header: list[str | None] | None = None
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        found = parse_header(line)
        if found is not None:
            header = found
            continue
        if header is None:
            continue
        tokens = line.split()
        if len(tokens) != len(header):
            continue
        values: dict[str, float | None] = {}
        for name, tok in zip(header, tokens, strict=True):
            if name is not None:
                values[name] = _number(tok)
        npu, chip = values.pop("npu", None), values.pop("chip", None)
        if npu is None:
            continue
        for pct in ("aicore_pct", "aicpu_pct", "ctrlcpu_pct", "mem_pct", "membw_pct"):
            v = values.get(pct)
            if v is not None and not 0 <= v <= 100:
                values[pct] = None  # out-of-range counters are dropped, not clamped
        yield NpuReading(npu=int(npu), chip=int(chip or 0), values=values)
