"""Install Debian packages for a service the first time it is needed, without starting them.

Why: a fresh CI machine has neither ClickHouse nor Prometheus nor Alertmanager, and the
suite must bring them itself. ``apt-get install`` of a daemon package normally starts its
system service (on the default ports, outside the project home); a temporary
``policy-rc.d`` answering 101 ("action forbidden") keeps it from doing so. One machine-wide
lock serialises installs: several homes or test sessions may try at once, and each would
otherwise create and remove ``policy-rc.d`` under the others' feet.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from infra.launcher.process import _SBIN_DIRS, InfraError, _file_lock, _run_logged, _tail, _which

log = logging.getLogger("infra")

APT_LOCK = Path("/run/lock/steplens-infra-apt.lock")
UPDATE_TIMEOUT_S = 900.0
INSTALL_TIMEOUT_S = 1500.0


def apt_install(packages: tuple[str, ...], apt_log: Path, installed: Callable[[], bool], what: str,
                recommends: bool = False) -> None:
    """``apt-get update`` then ``apt-get install -y packages`` unless ``installed()`` already holds
    (`recommends`: with the packages' recommended ones too).

    Runs under the machine-wide lock and re-checks ``installed()`` inside it (another
    process may have finished meanwhile). Raises InfraError (with the log's tail) on failure.
    """
    if installed():
        return
    hint = "apt-get update && apt-get install -y " + " ".join(packages)
    if os.geteuid() != 0:
        raise InfraError(f"{what}: not installed; run as root: {hint}")
    with _file_lock(APT_LOCK, f"{what} install"):
        if installed():
            return
        apt = _which("apt-get", _SBIN_DIRS)
        if apt is None:
            raise InfraError(f"{what}: not installed and no apt-get on this machine; {hint}")
        apt_log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        policy = Path("/usr/sbin/policy-rc.d")
        created_policy = False
        log.info("%s: installing %s with apt (log %s)", what, " ".join(packages), apt_log)
        try:
            if not policy.exists():
                policy.write_text("#!/bin/sh\nexit 101\n")
                policy.chmod(0o755)
                created_policy = True
            with apt_log.open("ab") as out:
                wait_lock = ["-o", "DPkg::Lock::Timeout=600"]  # third-party apt runs
                code = _run_logged([apt, *wait_lock, "update"], out, env, UPDATE_TIMEOUT_S)
                if code != 0:
                    raise InfraError(f"{what}: `apt-get update` failed (exit {code}); log {apt_log}\n{_tail(apt_log)}")
                no_recommends = [] if recommends else ["--no-install-recommends"]
                code = _run_logged([apt, *wait_lock, "install", "-y", *no_recommends, *packages],
                                   out, env, INSTALL_TIMEOUT_S)
                if code != 0:
                    raise InfraError(f"{what}: `apt-get install` failed (exit {code}); log {apt_log}\n{_tail(apt_log)}")
        finally:
            if created_policy:
                policy.unlink(missing_ok=True)
    if not installed():
        raise InfraError(f"{what}: apt finished but the program is still missing; {hint}")
