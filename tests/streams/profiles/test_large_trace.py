"""A synthetic 2 GB Kineto trace parses within 4 GiB RSS (marked `large`: about a minute or two).

The trace is written streaming to a temp dir; parsing runs in a child process so its peak RSS
(VmHWM, see streams.profiles.measure) is the parser's alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.profiles.synthetic import write_trace

SIZE = int(os.environ.get("STEPLENS_LARGE_TRACE_BYTES", 2 * 10**9))
RSS_LIMIT_MB = 4096


@pytest.mark.large
def test_two_gigabyte_trace_parses_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.json"
    written = write_trace(path, SIZE, layers=4000)
    assert written >= SIZE
    out = subprocess.run([sys.executable, "-m", "streams.profiles.measure", str(path)], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[3])
    result = orjson.loads(out.stdout.strip().splitlines()[-1])
    assert result["bytes"] == path.stat().st_size
    assert result["kernels"] > SIZE // 1000  # ~1 kernel per KB in this generator: the whole file was read
    assert result["peak_rss_mb"] < RSS_LIMIT_MB, result
    path.unlink()
