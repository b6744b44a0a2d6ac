"""Process helpers shared by the service launchers (infra/launcher/supervision.py and the servers) and the
package installer (infra/launcher/apt.py): the error they raise, a machine-wide file lock, a logged
subprocess, a log's tail, and finding a program.

Why a module of its own: apt.py needs these and clickhouse_server.py needs apt.py (ClickHouse is
installed on first start), so they live below both instead of in a circle of imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

POLL_INTERVAL = 0.25
LOCK_TIMEOUT = 900.0
TAIL_LINES = 30
_SBIN_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


class InfraError(RuntimeError):
    """A service could not be installed, started or stopped; the message says what to do."""


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    """Last ``lines`` lines of a log file (reads only the end of big files)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read()
    except OSError:
        return f"(no log at {path})"
    text = data.decode(errors="replace").splitlines()[-lines:]
    return "\n".join(text) if text else f"(log {path} is empty)"


def _which(name: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@contextlib.contextmanager
def _file_lock(path: Path, what: str) -> Iterator[None]:
    """Exclusive flock on ``path``, polled against a deadline (other processes may hold it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InfraError(
                        f"{what}: another process holds {path} for more than "
                        f"{LOCK_TIMEOUT:.0f}s; find it with `fuser {path}`"
                    ) from None
                time.sleep(POLL_INTERVAL)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_logged(argv: list[str], out: IO[bytes], env: Mapping[str, str], timeout: float) -> int:
    out.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
    out.flush()
    try:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=dict(env), timeout=timeout, check=False,
        ).returncode  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1
