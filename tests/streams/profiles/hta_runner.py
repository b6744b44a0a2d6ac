"""Real HolisticTraceAnalysis 0.5.0 for agreement tests: installed on first use, never mocked."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

HTA_REQUIREMENT = "HolisticTraceAnalysis==0.5.0"


def ensure_hta() -> None:
    if importlib.util.find_spec("hta") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", HTA_REQUIREMENT], check=True)
        importlib.invalidate_caches()


def hta_analysis(trace_dir: Path) -> Any:
    ensure_hta()
    trace_analysis = importlib.import_module("hta.trace_analysis")
    return trace_analysis.TraceAnalysis(trace_dir=str(trace_dir))
