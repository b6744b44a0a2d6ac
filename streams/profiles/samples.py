"""Where the shared real profiler samples are (tests and bench-parse read them in place, never copy them).

Order: ``STEPLENS_REAL_SAMPLES``; ``shared/data/real`` beside the repository (as CI lays it
out); the workspace's ``/work/shared/data/real``.
"""

from __future__ import annotations

import os
from pathlib import Path

from infra.settings import REPO_ROOT


def real_samples_dir() -> Path:
    explicit = os.environ.get("STEPLENS_REAL_SAMPLES")
    if explicit:
        return Path(explicit)
    beside = REPO_ROOT.parent / "shared" / "data" / "real"
    return beside if beside.is_dir() else Path("/work/shared/data/real")
