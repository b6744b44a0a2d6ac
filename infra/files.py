"""Private files and directories: the project home, the secrets and the spool are owner-only.

Why: the home holds telemetry, logs, Kafka/ClickHouse data and the generated passwords.
A ``0700`` directory protects everything inside it whatever the inner files' modes are,
so the home, the secrets directory and the spool are created (or tightened) to ``0700``
and every secret file is written ``0600`` atomically (never readable, even for a moment,
with a wider mode).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make it ``0700`` when this user owns it."""
    path = Path(path)
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a ``0600`` file, atomically (temp file + rename)."""
    path = Path(path)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # O_CREAT's mode is masked by the umask; be explicit
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def mode_of(path: Path) -> int:
    """Permission bits of ``path`` (e.g. ``0o700``)."""
    return stat.S_IMODE(Path(path).stat().st_mode)
