"""Headless Chromium for the report test: installed with apt when absent (never skipped)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--enable-logging=stderr", "--v=0",
)


def chromium() -> str:
    """Path of Debian's chromium; `apt-get install chromium` (root) when it is missing."""
    found = shutil.which("chromium")
    if found is None:
        subprocess.run(["apt-get", "update"], check=True, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"], check=True,
                       capture_output=True, timeout=1200)
        found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("chromium is not installed and apt-get could not install it")
    return found


def run(page: Path, profile: Path, *extra: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Open `page` (a file) headless with a fresh profile directory; stdout/stderr captured."""
    argv = [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
