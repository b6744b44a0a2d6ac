"""`python -m producers.relay` as a real process, for the Kafka tests of the relay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from infra.settings import Settings
from tests.producers.hook.test_ddp_kafka import _env

REPO = Path(__file__).resolve().parents[3]


class RelayProcess:
    """The relay in its own process (settings passed as STEPLENS_* variables); started once it listens."""

    def __init__(self, s: Settings, extra_env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **_env(s), "STEPLENS_RELAY_SOCKET": s.relay_socket,
               "STEPLENS_RELAY_FLUSH_INTERVAL_S": str(s.relay_flush_interval_s), **(extra_env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "producers.relay"], cwd=REPO, env=env,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline() if self.proc.stderr else ""  # printed once it listens
        assert "listening" in line, line

    def stop(self) -> str:
        """SIGTERM (a clean stop: flush, spool the rest); its stderr once it exited 0."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return err

    def kill(self) -> None:
        """SIGKILL (no flush, no cleanup: a crash or the OOM killer); returns once the process is gone."""
        self.proc.kill()
        self.proc.communicate(timeout=60)
        assert self.proc.returncode == -signal.SIGKILL
