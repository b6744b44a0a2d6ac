"""Where the project-local services live: the home directory and the loopback ports.

Why a module of its own: every server (Kafka, ClickHouse, Alertmanager, Prometheus, the loopback
cluster) and the CLI take an ``InfraConfig``; it sits below the supervision code and the servers.
Client-side settings (bootstrap, TLS, topics) are ``infra/settings.py``; ``client_settings()``
builds them for one instance.

Layout of ``<home>``::

    kafka/libs/            jars copied by Maven (+ completion marker)
    kafka/config/          server.properties, log4j.properties
    kafka/data/            KRaft log dir (meta.properties lives here once formatted)
    kafka/cluster.id       the cluster id used to format the storage
    clickhouse/            config.xml, users.xml
    secrets/               generated passwords, the project CA and the broker's PEM keystore
                           (0700 directory, 0600 files; see docs/security.md)
    clickhouse/data/       ClickHouse path, tmp_path, user_files, format_schemas
    logs/                  every log file (kafka.out, kafka-server.log, clickhouse-server.log...)
    run/                   pid files and lock files

The home is 0700: data, logs and configs inside inherit that protection.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.files import private_dir
from infra.launcher.process import InfraError
from infra.secrets import secrets_dir
from infra.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


def _env_port(env: Mapping[str, str], name: str, default: int) -> int:
    """Read a TCP port from the environment, failing with a message naming the variable."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise InfraError(f"{name}={raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise InfraError(f"{name}={port} is outside 1..65535")
    return port


def _default_home() -> Path:
    return REPO_ROOT / ".steplens"


@dataclass(frozen=True)
class InfraConfig:
    """Where the services live and which loopback ports they use."""

    home: Path = field(default_factory=_default_home)
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    clickhouse_tcp_port: int = 19000
    clickhouse_http_port: int = 18123
    clickhouse_interserver_port: int = 19009
    alertmanager_port: int = 19094   # infra/launcher/alertmanager.py (clustering off: no second port)
    prometheus_port: int = 19090     # infra/launcher/prometheus.py
    slurmctld_port: int = 16817      # infra/launcher/slurm.py (Slurm's 6817 + 10,000)
    slurmd_port: int = 16818

    def __post_init__(self) -> None:
        # Absolute paths: they are written into configs and matched against command lines.
        object.__setattr__(self, "home", Path(self.home).expanduser().resolve())
        ports = {
            "kafka_port": self.kafka_port,
            "kafka_controller_port": self.kafka_controller_port,
            "clickhouse_tcp_port": self.clickhouse_tcp_port,
            "clickhouse_http_port": self.clickhouse_http_port,
            "clickhouse_interserver_port": self.clickhouse_interserver_port,
            "alertmanager_port": self.alertmanager_port,
            "prometheus_port": self.prometheus_port,
            "slurmctld_port": self.slurmctld_port,
            "slurmd_port": self.slurmd_port,
        }
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise InfraError(f"InfraConfig.{name}={port} is outside 1..65535")
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port in seen:
                raise InfraError(f"InfraConfig.{name} and {seen[port]} both use port {port}")
            seen[port] = name

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> InfraConfig:
        """Build the config from STEPLENS_* variables so CI and developers can move things."""
        env = os.environ if env is None else env
        home_raw = env.get("STEPLENS_HOME", "").strip()
        return cls(
            home=Path(home_raw) if home_raw else _default_home(),
            kafka_port=_env_port(env, "STEPLENS_KAFKA_PORT", 19092),
            kafka_controller_port=_env_port(env, "STEPLENS_KAFKA_CONTROLLER_PORT", 19093),
            clickhouse_tcp_port=_env_port(env, "STEPLENS_CLICKHOUSE_TCP_PORT", 19000),
            clickhouse_http_port=_env_port(env, "STEPLENS_CLICKHOUSE_HTTP_PORT", 18123),
            clickhouse_interserver_port=_env_port(env, "STEPLENS_CLICKHOUSE_INTERSERVER_PORT", 19009),
            alertmanager_port=_env_port(env, "STEPLENS_ALERTMANAGER_PORT", 19094),
            prometheus_port=_env_port(env, "STEPLENS_PROMETHEUS_PORT", 19090),
            slurmctld_port=_env_port(env, "STEPLENS_SLURMCTLD_PORT", 16817),
            slurmd_port=_env_port(env, "STEPLENS_SLURMD_PORT", 16818),
        )

    @property
    def logs_dir(self) -> Path:
        """All service logs go here, so one path is enough when something fails."""
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def clickhouse_dir(self) -> Path:
        return self.home / "clickhouse"

    @property
    def secrets_dir(self) -> Path:
        """Generated passwords and TLS material (0700 directory, 0600 files)."""
        return secrets_dir(self.home)

    def ports(self) -> dict[str, int]:
        return {
            "STEPLENS_KAFKA_PORT": self.kafka_port,
            "STEPLENS_KAFKA_CONTROLLER_PORT": self.kafka_controller_port,
            "STEPLENS_CLICKHOUSE_TCP_PORT": self.clickhouse_tcp_port,
            "STEPLENS_CLICKHOUSE_HTTP_PORT": self.clickhouse_http_port,
            "STEPLENS_CLICKHOUSE_INTERSERVER_PORT": self.clickhouse_interserver_port,
            "STEPLENS_ALERTMANAGER_PORT": self.alertmanager_port,
            "STEPLENS_PROMETHEUS_PORT": self.prometheus_port,
            "STEPLENS_SLURMCTLD_PORT": self.slurmctld_port,
            "STEPLENS_SLURMD_PORT": self.slurmd_port,
        }

    def client_settings(self) -> Settings:
        """Settings for clients of these services (bootstrap, home and secrets of this instance)."""
        return Settings(home=self.home, kafka_bootstrap=f"{LOOPBACK}:{self.kafka_port}", secrets_dir=self.secrets_dir)

    def ensure_home(self) -> None:
        """Create (or tighten) the home, logs and run directories to 0700."""
        for d in (self.home, self.logs_dir, self.run_dir):
            private_dir(d)
