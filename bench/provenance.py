"""Where a benchmark figure came from: the machine and the commit, written into every result file.

A figure without its machine is not comparable (this project's numbers come from a shared
2-core VM), and one from uncommitted code is not reproducible: `git` says `-dirty` then.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, and the load average when the figure was taken (a shared box inflates it)."""
    model = platform.processor()
    mem_kb = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return {"cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1), "cpu_model": model,
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}


def git_commit() -> str:
    """HEAD, with `-dirty` when tracked code (result files aside) differs from it; on a copy of the tree
    without git (the GPU machine), STEPLENS_BENCH_GIT as the caller states it, marked `(stated)`."""
    stated = os.environ.get("STEPLENS_BENCH_GIT", "").strip()
    if stated:
        return f"{stated} (stated)"
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
                               cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
