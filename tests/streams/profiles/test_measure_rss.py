"""The parse's peak RSS is its own, not that of the process that started it (Linux keeps ru_maxrss
across execve: a full `make test` run's pytest holds gigabytes and once failed the 2 GB trace bound)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIG_MB = 600


def test_peak_rss_does_not_inherit_the_parent_peak() -> None:
    ballast = bytearray(BIG_MB * 1024 * 1024)
    for i in range(0, len(ballast), 4096):  # touch every page: resident in this process
        ballast[i] = 1
    code = "from streams.profiles.measure import peak_rss_mb; print(peak_rss_mb())"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    del ballast
    assert float(out.stdout.strip()) < BIG_MB / 2, out.stdout
