"""Project-local Kafka (KRaft) and ClickHouse servers on loopback.

Why: integration tests and benchmarks need *real* services, but the machines that run
them have no Docker and must not be reconfigured system-wide.  Everything here lives
under one project-local home directory (``.steplens/`` by default): generated configs,
data, logs, pid files and the Kafka jars resolved from Maven Central.  Every operation
is idempotent so test fixtures, the Makefile and humans can all call it safely.

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

The home is 0700: data, logs and configs inside inherit that protection. Kafka listens
with SASL/SCRAM-SHA-512 over TLS only (ACLs by StandardAuthorizer, no topic auto-creation
or deletion); ClickHouse has a password on every user (``default``, ``steplens_writer``
and the read-only ``steplens_reader``). Everything is generated on the first start.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from xml.sax.saxutils import escape as xml_escape

from infra.apt import apt_install
from infra.files import private_dir, write_private
from infra.ports import ephemeral_port_warnings, ephemeral_range
from infra.process import (
    _SBIN_DIRS,
    POLL_INTERVAL,
    TAIL_LINES,
    InfraError,
    _file_lock,
    _tail,
    _which,
)
from infra.secrets import (
    CLICKHOUSE_DEFAULT,
    CLICKHOUSE_READER,
    CLICKHOUSE_WRITER,
    KAFKA_PRINCIPALS,
    ensure_clickhouse_passwords,
    ensure_kafka_passwords,
    secrets_dir,
)
from infra.settings import Settings
from infra.tls import TlsFiles, ensure_tls

log = logging.getLogger("infra")

REPO_ROOT = Path(__file__).resolve().parent.parent
POM_PATH = Path(__file__).resolve().parent / "kafka" / "pom.xml"
KAFKA_VERSION = "3.9.1"
LOOPBACK = "127.0.0.1"
KAFKA_NODE_ID = 1
STOP_TIMEOUT = 30.0
MAVEN_TIMEOUT = 1800.0
MAX_OUT_BYTES = 20 * 1024 * 1024

# Exit codes of servers this Python process spawned and has reaped (see _alive).
_EXIT_CODES: dict[int, int] = {}


# --------------------------------------------------------------------------- config


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
    alertmanager_port: int = 19094   # infra/alertmanager.py (clustering off: no second port)
    prometheus_port: int = 19090     # infra/prometheus.py

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
        }

    def client_settings(self) -> Settings:
        """Settings for clients of these services (bootstrap, home and secrets of this instance)."""
        return Settings(home=self.home, kafka_bootstrap=f"{LOOPBACK}:{self.kafka_port}", secrets_dir=self.secrets_dir)

    def ensure_home(self) -> None:
        """Create (or tighten) the home, logs and run directories to 0700."""
        for d in (self.home, self.logs_dir, self.run_dir):
            private_dir(d)


# --------------------------------------------------------------------------- processes


def _proc_cmdline(pid: int) -> str | None:
    """The command line of ``pid`` joined by spaces, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _alive(pid: int) -> bool:
    """True if ``pid`` runs (zombies count as dead; our own dead children get reaped)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            _EXIT_CODES[pid] = os.waitstatus_to_exitcode(wait_status)
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _read_pid_file(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _listening_pids(port: int) -> list[int]:
    """Pids with a LISTEN socket on ``port`` (any address), found through /proc."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != "0A":  # 0A == TCP_LISTEN
                continue
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return []
    targets = {f"socket:[{inode}]" for inode in inodes}
    pids: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    pids.append(int(proc.name))
                    break
            except OSError:
                continue
    return pids


def _port_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:``port`` (SO_REUSEADDR ignores TIME_WAIT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _tcp_open(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    """Signal the process group when ``pid`` leads one (our launches do), else the pid."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _terminate(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, wait up to ``timeout`` for a clean exit, then SIGKILL and wait again."""
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
    if _alive(pid):
        log.warning("pid %d ignored SIGTERM for %.0fs; sending SIGKILL", pid, timeout)
        _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if _alive(pid):
        raise InfraError(f"pid {pid} survived SIGKILL; inspect it with `ps -fp {pid}`")


# --------------------------------------------------------------------------- base class


class _Service:
    """Pid-file + lock + health-polling lifecycle shared by Kafka and ClickHouse."""

    name: ClassVar[str] = ""

    def __init__(self, cfg: InfraConfig) -> None:
        self.cfg = cfg

    # --- to implement -------------------------------------------------------------
    def install(self) -> None:
        raise NotImplementedError

    @property
    def address(self) -> str:
        raise NotImplementedError

    def _owns(self, cmdline: str) -> bool:
        """Whether a process command line is *this* service instance (guards pid reuse)."""
        raise NotImplementedError

    def _ports(self) -> list[tuple[int, str]]:
        raise NotImplementedError

    def _probe(self, timeout: float) -> bool:
        """One network-level health check, bounded by ``timeout`` seconds."""
        raise NotImplementedError

    def _prepare(self) -> list[str]:
        """Write configs / initialise storage; return the server argv."""
        raise NotImplementedError

    def _log_files(self) -> list[Path]:
        """Logs whose tails explain a failure, most useful first."""
        raise NotImplementedError

    def _outdated(self) -> bool:
        """Whether a running instance was started with a configuration this code no longer writes."""
        return False

    # --- paths ----------------------------------------------------------------------
    @property
    def pid_file(self) -> Path:
        return self.cfg.run_dir / f"{self.name}.pid"

    @property
    def out_file(self) -> Path:
        """stdout/stderr of the server process (crashes before logging is set up land here)."""
        return self.cfg.logs_dir / f"{self.name}.out"

    @property
    def _workdir(self) -> Path:
        return self.cfg.home / self.name

    # --- public lifecycle -----------------------------------------------------------
    def pid(self) -> int | None:
        """Pid of this instance if it runs: from the pid file, else from the port owner."""
        pid = _read_pid_file(self.pid_file)
        if pid is not None and _alive(pid) and self._owns(_proc_cmdline(pid) or ""):
            return pid
        for candidate in _listening_pids(self._ports()[0][0]):
            if _alive(candidate) and self._owns(_proc_cmdline(candidate) or ""):
                return candidate
        return None

    def healthy(self) -> bool:
        """Our process runs *and* answers real requests (an open port is not enough)."""
        return self.pid() is not None and self._probe(5.0)

    def start(self, timeout: float = 60.0) -> bool:
        """Start unless already healthy; True if this call started it, False if it was up."""
        with self._lock():
            deadline = time.monotonic() + timeout
            pid = self.pid()
            if pid is not None and self._outdated():
                log.warning("%s: pid %d runs with a configuration from before the lock-down; restarting it",
                            self.name, pid)
                _terminate(pid)
                pid = None
            if pid is not None:
                self._write_pid(pid)
                if self._probe(min(5.0, timeout)):
                    return False
                log.info("%s: pid %d runs but does not answer yet; waiting", self.name, pid)
                self._wait_healthy(pid, deadline, timeout)
                return False
            self.pid_file.unlink(missing_ok=True)  # stale: process gone or not ours
            self.cfg.ensure_home()
            self._warn_ephemeral_ports()
            self._check_ports()
            self.install()
            argv = self._prepare()
            self._check_ports()
            pid = self._spawn(argv)
            log.info("%s: started pid %d, waiting up to %.0fs", self.name, pid, timeout)
            deadline = time.monotonic() + timeout
            try:
                self._wait_healthy(pid, deadline, timeout)
            except BaseException:
                _terminate(pid, timeout=10.0)
                self.pid_file.unlink(missing_ok=True)
                raise
            log.info("%s: ready at %s", self.name, self.address)
            return True

    def launch(self) -> int | None:
        """Spawn the server unless it runs; its pid, or None if it already ran (no health wait).

        For a cluster, whose nodes only become healthy together: launch all, then await_ready each.
        """
        with self._lock():
            if self.pid() is not None:
                return None
            self.pid_file.unlink(missing_ok=True)
            self.cfg.ensure_home()
            self._warn_ephemeral_ports()
            self._check_ports()
            self.install()
            argv = self._prepare()
            self._check_ports()
            pid = self._spawn(argv)
            log.info("%s: launched pid %d", self.name, pid)
            return pid

    def await_ready(self, pid: int | None, deadline: float, timeout: float) -> None:
        """Wait until the launched (or running) server answers; InfraError with its log tails if not."""
        if pid is None:
            raise InfraError(f"{self.name}: not running; `python -m infra up --cluster` starts it")
        self._wait_healthy(pid, deadline, timeout)

    @staticmethod
    def signal(pid: int, sig: int) -> None:
        """Signal a server's process group (tests use SIGKILL to crash one)."""
        _signal(pid, sig)

    def stop(self) -> None:
        """Stop this instance if it runs (SIGTERM, then SIGKILL after 30 s); idempotent."""
        with self._lock():
            pid = self.pid()
            if pid is not None:
                log.info("%s: stopping pid %d", self.name, pid)
                _terminate(pid)
            self.pid_file.unlink(missing_ok=True)

    # --- helpers ----------------------------------------------------------------------
    def _lock(self) -> contextlib.AbstractContextManager[None]:
        """Serialise start/stop across processes (pytest workers, make, a shell)."""
        return _file_lock(self.cfg.run_dir / f"{self.name}.lock", self.name)

    def _write_pid(self, pid: int) -> None:
        self.cfg.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.pid_file.with_suffix(".pid.tmp")
        tmp.write_text(f"{pid}\n")
        tmp.replace(self.pid_file)

    def _warn_ephemeral_ports(self) -> None:
        ports = {f"{what} port": port for port, what in self._ports()}
        for message in ephemeral_port_warnings(ports, ephemeral_range()):
            log.warning("%s: %s", self.name, message)

    def _check_ports(self) -> None:
        for port, what in self._ports():
            if _port_free(port):
                continue
            holders = _listening_pids(port)
            who = ", ".join(f"pid {p} ({(_proc_cmdline(p) or '?')[:160]})" for p in holders)
            raise InfraError(
                f"{self.name}: port {port} ({what}) on {LOOPBACK} is already in use"
                f"{' by ' + who if who else ''}, and it is not our running {self.name}. "
                f"Stop that process or choose other ports via the STEPLENS_*_PORT variables."
            )

    def _spawn(self, argv: list[str]) -> int:
        """Launch detached: own session/process group, stdin /dev/null, output to out_file.

        posix_spawn instead of Popen: the server must outlive this process, and a Popen
        object for a still-running child triggers a ResourceWarning at interpreter exit.
        """
        self.cfg.logs_dir.mkdir(parents=True, exist_ok=True)
        if self.out_file.exists() and self.out_file.stat().st_size > MAX_OUT_BYTES:
            self.out_file.replace(self.out_file.with_suffix(".out.1"))
        banner = f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n"
        out_fd = os.open(self.out_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(out_fd, banner.encode())
            # `sh -c 'cd DIR && exec ...'`: sets the working directory (posix_spawn in 3.11
            # cannot) and then execs, so the pid and /proc/<pid>/cmdline are the server's.
            wrapped = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(self._workdir), *argv]
            pid = os.posix_spawn(
                "/bin/sh",
                wrapped,
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out_fd, 1),
                    (os.POSIX_SPAWN_DUP2, out_fd, 2),
                ],
                setsid=True,  # own process group: stop() signals the whole tree
            )
        finally:
            os.close(out_fd)
        self._write_pid(pid)
        return pid

    def _wait_healthy(self, pid: int, deadline: float, timeout: float) -> None:
        """Poll the real health probe until ``deadline``; fail fast if the process dies."""
        while True:
            if not _alive(pid):
                code = _EXIT_CODES.get(pid)
                raise self._failure(
                    f"{self.name} (pid {pid}) exited{f' with code {code}' if code is not None else ''} during startup"
                )
            remaining = deadline - time.monotonic()
            if self._probe(max(1.0, min(10.0, remaining))):
                return
            if time.monotonic() >= deadline:
                raise self._failure(
                    f"{self.name} (pid {pid}) did not become healthy at {self.address} "
                    f"within {timeout:.0f}s; `python -m infra down --only {self.name}` resets it"
                )
            time.sleep(POLL_INTERVAL)

    def _failure(self, what: str) -> InfraError:
        parts = [what + "."]
        for path in self._log_files():
            parts.append(f"--- last {TAIL_LINES} lines of {path} ---\n{_tail(path)}")
        parts.append(f"All logs: {self.cfg.logs_dir}")
        return InfraError("\n".join(parts))

    def describe(self) -> str:
        """One status line: running/stopped, pid and address."""
        pid = self.pid()
        if pid is None:
            busy = [str(port) for port, _ in self._ports() if not _port_free(port)]
            note = f"  (port {', '.join(busy)} held by another process)" if busy else ""
            return f"{self.name:<10} stopped      {self.address}{note}"
        state = "running" if self._probe(5.0) else "running, NOT answering"
        return f"{self.name:<10} {state}  pid {pid}  {self.address}"


# --------------------------------------------------------------------------- Kafka


def _new_cluster_id() -> str:
    """A Kafka-style random Uuid: 16 random bytes, url-safe base64 without padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):  # Kafka avoids ids that look like CLI flags
            return cid


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


class KafkaBroker(_Service):
    """Single-node KRaft Kafka (broker+controller in one JVM) on 127.0.0.1."""

    name: ClassVar[str] = "kafka"

    # --- node identity (infra/kafka_cluster.py overrides these for its three nodes) ----
    @property
    def node_id(self) -> int:
        return KAFKA_NODE_ID

    @property
    def port(self) -> int:
        """The SASL_SSL client listener."""
        return self.cfg.kafka_port

    @property
    def controller_port(self) -> int:
        return self.cfg.kafka_controller_port

    @property
    def node_dir(self) -> Path:
        """This node's config, data, cluster id and security marker (the jars are shared: libs_dir)."""
        return self.cfg.kafka_dir

    @property
    def node_logs_dir(self) -> Path:
        """``kafka.logs.dir``: kafka-server.log and kafka-controller.log of this node."""
        return self.cfg.logs_dir

    def quorum_voters(self) -> str:
        return f"{self.node_id}@{LOOPBACK}:{self.controller_port}"

    def replication_properties(self) -> list[str]:
        """Replication of the internal topics: one node, one copy."""
        return [
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
        ]

    def heap(self) -> list[str]:
        return ["-Xms256m", "-Xmx768m"]

    def client_settings(self) -> Settings:
        """Settings the health probe and the SCRAM sync connect with (this node's address)."""
        return self.cfg.client_settings()

    # --- paths / addresses ----------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def address(self) -> str:
        return self.bootstrap

    @property
    def libs_dir(self) -> Path:
        return self.cfg.kafka_dir / "libs"

    @property
    def config_dir(self) -> Path:
        return self.node_dir / "config"

    @property
    def data_dir(self) -> Path:
        return self.node_dir / "data"

    @property
    def server_properties(self) -> Path:
        return self.config_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.config_dir / "log4j.properties"

    @property
    def _marker(self) -> Path:
        return self.libs_dir / ".steplens-complete.json"

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.cfg.secrets_dir)

    @property
    def _security_marker(self) -> Path:
        """Records which admin password the storage was formatted with (SCRAM lives in the metadata log)."""
        return self.node_dir / "security.json"

    # --- install --------------------------------------------------------------------
    def _java(self) -> str:
        """Path of a Java 11+ binary (checked once per instance)."""
        cached: str | None = getattr(self, "_java_path", None)
        if cached is None:
            cached = self._find_java()
            self._java_path = cached
        return cached

    def _find_java(self) -> str:
        java_home = os.environ.get("JAVA_HOME")
        java = str(Path(java_home) / "bin" / "java") if java_home else None
        if not java or not os.access(java, os.X_OK):
            java = _which("java")
        if java is None:
            raise InfraError(
                "kafka: `java` not found (Kafka 3.9 needs Java 11+). "
                "Install it: apt-get install -y openjdk-17-jre-headless"
            )
        major = _java_major(java)
        if major is None or major < 11:
            raise InfraError(
                f"kafka: {java} is Java {major or 'unknown'}, Kafka {KAFKA_VERSION} needs 11+. "
                "Install: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"
            )
        return java

    def _pom_digest(self) -> str:
        return hashlib.sha256(POM_PATH.read_bytes()).hexdigest()

    def jars_cached(self) -> bool:
        """True when the marker matches the current pom and every listed jar exists."""
        try:
            marker = json.loads(self._marker.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(marker, dict) or marker.get("pom_sha256") != self._pom_digest():
            return False
        jars = marker.get("jars")
        if not isinstance(jars, list) or not jars:
            return False
        return all((self.libs_dir / str(j)).is_file() and (self.libs_dir / str(j)).stat().st_size > 0 for j in jars)

    def install(self) -> None:
        """Check Java and resolve the Kafka jars from Maven Central (no-op when cached)."""
        self._java()
        if self.jars_cached():
            return
        # Separate lock file from start()'s: flock does not nest within one process.
        with _file_lock(self.cfg.run_dir / "kafka-install.lock", "kafka install"):
            if not self.jars_cached():  # another process may have finished meanwhile
                self._resolve_jars()

    def _resolve_jars(self) -> None:
        """Run Maven's copy-dependencies into a scratch dir, then swap it into place."""
        mvn = _which("mvn")
        if mvn is None:
            raise InfraError(
                "kafka: `mvn` not found; it resolves the Kafka jars from Maven Central. "
                "Install it: apt-get install -y maven"
            )
        self.cfg.logs_dir.mkdir(parents=True, exist_ok=True)
        partial = self.cfg.kafka_dir / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        mvn_log = self.cfg.logs_dir / "maven.log"
        argv = [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM_PATH),
            "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
        ]  # fmt: skip
        log.info("kafka: resolving Kafka %s jars with Maven (first run downloads ~50 MB)", KAFKA_VERSION)
        with mvn_log.open("ab") as out:
            out.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            try:
                result = subprocess.run(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    timeout=MAVEN_TIMEOUT, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise InfraError(
                    f"kafka: Maven did not finish within {MAVEN_TIMEOUT:.0f}s; "
                    f"is Maven Central reachable? Log: {mvn_log}\n{_tail(mvn_log)}"
                ) from None
        jars = sorted(p.name for p in partial.glob("*.jar"))
        if result.returncode != 0 or not any(j.startswith("kafka_2.13-") for j in jars):
            raise InfraError(
                f"kafka: Maven failed to resolve {POM_PATH} (exit {result.returncode}); "
                f"check access to Maven Central. Log: {mvn_log}\n{_tail(mvn_log)}"
            )
        (partial / self._marker.name).write_text(json.dumps({"pom_sha256": self._pom_digest(), "jars": jars}, indent=1))
        shutil.rmtree(self.libs_dir, ignore_errors=True)
        partial.replace(self.libs_dir)
        log.info("kafka: %d jars cached in %s", len(jars), self.libs_dir)

    # --- configuration --------------------------------------------------------------
    def render_server_properties(self, admin_password: str = "") -> str:
        """server.properties for a locked-down one-node KRaft cluster with test-friendly settings.

        Clients: SASL_SSL (SCRAM-SHA-512) only. Controller link: mutual TLS with the broker's
        certificate (KRaft cannot use SCRAM there: the credentials live in the metadata the
        controller serves). Authorisation: StandardAuthorizer, deny unless an ACL allows.
        """
        tls = self.tls
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{admin_password}";'
        )
        return "\n".join([
            "# Generated by infra/services.py -- edits are overwritten on every start.",
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={self.quorum_voters()}",
            f"listeners=SASL_SSL://{LOOPBACK}:{self.port},"
            f"CONTROLLER://{LOOPBACK}:{self.controller_port}",
            f"advertised.listeners=SASL_SSL://{LOOPBACK}:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=SASL_SSL",
            "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls.broker_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls.ca_cert}",
            "ssl.enabled.protocols=TLSv1.2,TLSv1.3",
            "listener.name.controller.ssl.client.auth=required",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:admin;{tls.broker_principal}",
            "allow.everyone.if.no.acl.found=false",
            f"log.dirs={self.data_dir}",
            "num.network.threads=2",
            "num.io.threads=4",
            "num.recovery.threads.per.data.dir=1",
            "num.partitions=4",
            "auto.create.topics.enable=false",
            "delete.topic.enable=false",
            *self.replication_properties(),
            "offsets.topic.num.partitions=8",
            "transaction.state.log.num.partitions=8",
            "group.initial.rebalance.delay.ms=0",
            "message.max.bytes=2097152",
            "replica.fetch.max.bytes=2097152",
            "log.retention.hours=24",
            "log.retention.check.interval.ms=300000",
            "",
        ])  # fmt: skip

    def render_log4j_properties(self) -> str:
        """log4j 1.x (reload4j) config: console -> kafka.out, files under kafka.logs.dir."""
        return "\n".join([
            "# Generated by infra/services.py",
            "log4j.rootLogger=INFO, stdout, kafkaAppender",
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender",
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.appender.kafkaAppender=org.apache.log4j.RollingFileAppender",
            "log4j.appender.kafkaAppender.File=${kafka.logs.dir}/kafka-server.log",
            "log4j.appender.kafkaAppender.MaxFileSize=50MB",
            "log4j.appender.kafkaAppender.MaxBackupIndex=3",
            "log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.appender.controllerAppender=org.apache.log4j.RollingFileAppender",
            "log4j.appender.controllerAppender.File=${kafka.logs.dir}/kafka-controller.log",
            "log4j.appender.controllerAppender.MaxFileSize=20MB",
            "log4j.appender.controllerAppender.MaxBackupIndex=2",
            "log4j.appender.controllerAppender.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.controllerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.org.apache.kafka=INFO",
            "log4j.logger.kafka=INFO",
            "log4j.logger.kafka.request.logger=WARN",
            "log4j.logger.kafka.controller=INFO, controllerAppender",
            "log4j.additivity.kafka.controller=false",
            "log4j.logger.state.change.logger=INFO, controllerAppender",
            "log4j.additivity.state.change.logger=false",
            "",
        ])  # fmt: skip

    def cluster_id(self) -> str | None:
        """The cluster id the storage was formatted with (meta.properties wins)."""
        meta = self.data_dir / "meta.properties"
        with contextlib.suppress(OSError):
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        with contextlib.suppress(OSError):
            return (self.node_dir / "cluster.id").read_text().strip() or None
        return None

    def _jvm_base(self, java: str, heap: list[str]) -> list[str]:
        return [
            java,
            *heap,
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration={self.log4j_properties.as_uri()}",
            f"-Dkafka.logs.dir={self.node_logs_dir}",
            "-cp",
            f"{self.libs_dir}/*",
        ]

    @staticmethod
    def _password_digest(password: str) -> str:
        return hashlib.sha256(password.encode()).hexdigest()

    def _retire_unsecured_storage(self, admin_password: str) -> None:
        """Move aside storage formatted without (or with other) SCRAM credentials.

        SCRAM users live in the KRaft metadata log, which can only be seeded at format time
        without a working login; a plaintext-era or foreign storage cannot be logged into.
        """
        if not (self.data_dir / "meta.properties").exists():
            return
        try:
            marker = json.loads(self._security_marker.read_text())
        except (OSError, ValueError):
            marker = None
        if isinstance(marker, dict) and marker.get("admin_sha256") == self._password_digest(admin_password):
            return
        aside = self.node_dir / f"data.unsecured-{time.strftime('%Y%m%d-%H%M%S')}"
        log.warning("kafka: %s was formatted without the current SCRAM credentials; moving it to %s and "
                    "formatting a locked-down storage (delete the old directory when you no longer need it)",
                    self.data_dir, aside)
        self.data_dir.replace(aside)
        (self.node_dir / "cluster.id").unlink(missing_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def _prepare(self) -> list[str]:
        java = self._java()
        self.cfg.ensure_home()
        for d in (self.config_dir, self.data_dir, self.node_logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        passwords = ensure_kafka_passwords(self.cfg.secrets_dir)
        ensure_tls(self.cfg.secrets_dir)
        self._retire_unsecured_storage(passwords["admin"])
        write_private(self.server_properties, self.render_server_properties(passwords["admin"]).encode())
        self.log4j_properties.write_text(self.render_log4j_properties())
        if not (self.data_dir / "meta.properties").exists():
            cid_file = self.node_dir / "cluster.id"
            cid = self.cluster_id() or _new_cluster_id()
            cid_file.write_text(cid + "\n")
            # SCRAM users are seeded at format time; the passwords go through a 0600 Java
            # argument file, never the command line (which every local user can read).
            scram = [f"SCRAM-SHA-512=[name={p},password={passwords[p]}]" for p in KAFKA_PRINCIPALS]
            tool_args = ["kafka.tools.StorageTool", "format", "-t", cid, "-c", str(self.server_properties)]
            for entry in scram:
                tool_args += ["--add-scram", entry]
            argfile = self.config_dir / "format.args"
            write_private(argfile, "".join(f'"{a}"\n' for a in tool_args).encode())
            argv = [*self._jvm_base(java, ["-Xmx256m"]), f"@{argfile}"]
            log.info("kafka: formatting KRaft storage in %s (cluster id %s)", self.data_dir, cid)
            try:
                res = subprocess.run(
                    argv, cwd=self.node_dir, stdin=subprocess.DEVNULL,
                    capture_output=True, text=True, timeout=120, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise InfraError("kafka: StorageTool format did not finish in 120s") from None
            finally:
                argfile.unlink(missing_ok=True)
            if res.returncode != 0 or not (self.data_dir / "meta.properties").exists():
                raise InfraError(
                    f"kafka: formatting {self.data_dir} failed (exit {res.returncode}). "
                    f"If the directory holds an old cluster, delete {self.data_dir}.\n"
                    f"{(res.stdout + res.stderr)[-4000:]}"
                )
            write_private(self._security_marker, json.dumps(
                {"admin_sha256": self._password_digest(passwords["admin"]), "mechanism": "SCRAM-SHA-512"}
            ).encode())
        else:
            existing = self.cluster_id()
            if existing:
                (self.node_dir / "cluster.id").write_text(existing + "\n")
        heap = [
            *self.heap(),
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
        ]
        return [*self._jvm_base(java, heap), "kafka.Kafka", str(self.server_properties)]

    # --- identity & health ----------------------------------------------------------
    def _owns(self, cmdline: str) -> bool:
        return "kafka.Kafka" in cmdline and str(self.server_properties) in cmdline

    def _outdated(self) -> bool:
        """A broker started before the lock-down has a plaintext listener no client here can use."""
        try:
            return "listeners=SASL_SSL://" not in self.server_properties.read_text()
        except OSError:
            return False

    def _ports(self) -> list[tuple[int, str]]:
        return [
            (self.port, "Kafka broker listener"),
            (self.controller_port, "Kafka KRaft controller listener"),
        ]

    def _log_files(self) -> list[Path]:
        return [self.out_file]

    def _probe(self, timeout: float) -> bool:
        """Ask the broker for cluster metadata with kafka-python; our cluster id must answer."""
        expected = self.cluster_id()
        # Cheap pre-check: kafka-python leaks its IO thread when bootstrap fails.
        if expected is None or not _tcp_open(self.port, min(timeout, 1.0)):
            return False
        from kafka import KafkaAdminClient  # type: ignore[import-untyped,unused-ignore]

        from infra.clients import kafka_client_config

        try:
            admin = KafkaAdminClient(
                **kafka_client_config(self.client_settings(), "admin"),
                client_id="steplens-infra-health",
                request_timeout_ms=max(1000, int(timeout * 1000)),
                bootstrap_timeout_ms=max(1000, int(timeout * 1000)),
            )
        except Exception:  # any failure means "not healthy yet"
            return False
        try:
            info = admin.describe_cluster()
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                admin.close()
        if not isinstance(info, dict) or info.get("cluster_id") != expected:
            return False
        brokers = info.get("brokers") or []
        return any(
            isinstance(b, dict)
            and b.get("broker_id", b.get("node_id")) == self.node_id
            and not b.get("is_fenced", False)
            for b in brokers
        )

    def start(self, timeout: float = 90.0) -> bool:
        """Start the broker (resolving jars, formatting storage first); False if already up."""
        started = super().start(timeout)
        if started:
            self.sync_users()
        return started

    def sync_users(self, rotate: tuple[str, ...] = ()) -> list[str]:
        """Give every principal with a password file a SCRAM credential (see sync_users_via)."""
        return self.sync_users_via(self.client_settings(), rotate)

    def sync_users_via(self, settings: Settings, rotate: tuple[str, ...] = ()) -> list[str]:
        """Give every principal with a password file a SCRAM credential (as admin); names changed.

        Principals seeded at format time already have one; this covers principals added
        since, and ``rotate`` re-issues the named ones from their (new) password files.
        """
        from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion

        from infra.clients import kafka_client_config

        passwords = ensure_kafka_passwords(self.cfg.secrets_dir)
        admin = KafkaAdminClient(**kafka_client_config(settings, "admin"), client_id="steplens-infra-users")
        try:
            described = admin.describe_user_scram_credentials()
            known = set(described) if isinstance(described, dict) else set()
            todo = [p for p in KAFKA_PRINCIPALS if p != "admin" and (p not in known or p in rotate)]
            if todo:
                errors = admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion(p, "SCRAM-SHA-512", passwords[p], iterations=8192) for p in todo]
                )
                failed = {u: e for u, e in (errors or {}).items() if e}
                if failed:
                    raise InfraError(f"kafka: could not set SCRAM credentials: {failed}")
                log.info("kafka: SCRAM credentials set for %s", ", ".join(todo))
            return todo
        finally:
            admin.close()


# --------------------------------------------------------------------------- ClickHouse


CLICKHOUSE_PACKAGES = ("clickhouse-server", "clickhouse-client")


class ClickHouseServer(_Service):
    """Debian's ClickHouse 18.16 server with a project-local config, data and logs."""

    name: ClassVar[str] = "clickhouse"

    # --- node identity (infra/clickhouse_cluster.py overrides these for its replicas) ----
    @property
    def tcp_port(self) -> int:
        return self.cfg.clickhouse_tcp_port

    @property
    def http_port(self) -> int:
        return self.cfg.clickhouse_http_port

    @property
    def interserver_port(self) -> int:
        return self.cfg.clickhouse_interserver_port

    @property
    def node_dir(self) -> Path:
        """config.xml, users.xml and data/ of this server."""
        return self.cfg.clickhouse_dir

    def extra_config(self) -> str:
        """More `<yandex>` elements (a cluster node: remote_servers, macros, zookeeper); none alone."""
        return ""

    def extra_profile(self) -> str:
        """More settings of the `default` profile (a cluster node: synchronous Distributed inserts)."""
        return ""

    @property
    def url(self) -> str:
        return f"clickhouse://{LOOPBACK}:{self.tcp_port}"

    @property
    def address(self) -> str:
        return f"tcp {LOOPBACK}:{self.tcp_port}, http {LOOPBACK}:{self.http_port}"

    @property
    def config_xml(self) -> Path:
        return self.node_dir / "config.xml"

    @property
    def users_xml(self) -> Path:
        return self.node_dir / "users.xml"

    @property
    def data_dir(self) -> Path:
        return self.node_dir / "data"

    @property
    def server_log(self) -> Path:
        return self.cfg.logs_dir / f"{self.name}-server.log"

    @property
    def error_log(self) -> Path:
        return self.cfg.logs_dir / f"{self.name}-server.err.log"

    # --- install --------------------------------------------------------------------
    @staticmethod
    def binary() -> str | None:
        """Path of clickhouse-server (Debian puts it in /usr/sbin, often not on PATH)."""
        return _which("clickhouse-server", _SBIN_DIRS)

    def install(self) -> None:
        """Install Debian's clickhouse-server with apt if missing, without starting its service."""
        apt_install(CLICKHOUSE_PACKAGES, self.cfg.logs_dir / "apt.log", lambda: self.binary() is not None,
                    "clickhouse", recommends=True)

    # --- configuration --------------------------------------------------------------
    def render_config_xml(self) -> str:
        """Server config in the 18.16 `<yandex>` format: loopback only, everything local."""
        d = xml_escape(str(self.data_dir))
        return f"""<?xml version="1.0"?>
<!-- Generated by infra/services.py; overwritten on every start. -->
<yandex>
    <logger>
        <level>information</level>
        <log>{xml_escape(str(self.server_log))}</log>
        <errorlog>{xml_escape(str(self.error_log))}</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>{LOOPBACK}</listen_host>
    <tcp_port>{self.tcp_port}</tcp_port>
    <http_port>{self.http_port}</http_port>
    <interserver_http_port>{self.interserver_port}</interserver_http_port>
    <interserver_http_host>{LOOPBACK}</interserver_http_host>
    <max_connections>1024</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>{d}/</path>
    <tmp_path>{d}/tmp/</tmp_path>
    <user_files_path>{d}/user_files/</user_files_path>
    <format_schema_path>{d}/format_schemas/</format_schema_path>
    <users_config>{xml_escape(str(self.users_xml))}</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
{self.extra_config()}</yandex>
"""

    def render_users_xml(self, passwords: Mapping[str, str] | None = None) -> str:
        """Three password-protected users, loopback only.

        ``default`` (administration, health checks), ``steplens_writer`` (landing and
        migrations) and ``steplens_reader`` (queries and reports; profile ``readonly`` with
        ``readonly=1``: no INSERT, no DDL, no settings changes). Passwords are stored as
        SHA-256 (``password_sha256_hex``); the clear text is only in the secrets directory.
        """
        if passwords is None:
            passwords = ensure_clickhouse_passwords(self.cfg.secrets_dir)

        def user(name: str, profile: str) -> str:
            digest = hashlib.sha256(passwords[name].encode()).hexdigest()
            return f"""        <{name}>
            <password_sha256_hex>{digest}</password_sha256_hex>
            <networks>
                <ip>::1</ip>
                <ip>127.0.0.1</ip>
            </networks>
            <profile>{profile}</profile>
            <quota>default</quota>
        </{name}>
"""

        users = (user(CLICKHOUSE_DEFAULT, "default") + user(CLICKHOUSE_WRITER, "default")
                 + user(CLICKHOUSE_READER, "readonly"))
        return f"""<?xml version="1.0"?>
<!-- Generated by infra/services.py; overwritten on every start. Passwords: {xml_escape(str(self.cfg.secrets_dir))} -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <use_uncompressed_cache>0</use_uncompressed_cache>
            <load_balancing>random</load_balancing>
{self.extra_profile()}        </default>
        <readonly>
            <max_memory_usage>4000000000</max_memory_usage>
            <use_uncompressed_cache>0</use_uncompressed_cache>
            <load_balancing>random</load_balancing>
            <readonly>1</readonly>
        </readonly>
    </profiles>
    <users>
{users}    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
"""

    def password(self, user: str) -> str:
        """The generated password of ``user`` (default, steplens_writer or steplens_reader)."""
        return ensure_clickhouse_passwords(self.cfg.secrets_dir)[user]

    def url_for(self, user: str) -> str:
        """``clickhouse://user:password@host:port`` for one of the generated users."""
        return f"clickhouse://{user}:{self.password(user)}@{LOOPBACK}:{self.tcp_port}"

    def _prepare(self) -> list[str]:
        binary = self.binary()
        if binary is None:
            raise InfraError("clickhouse: clickhouse-server binary disappeared after install()")
        self.cfg.ensure_home()
        for d in (self.node_dir, self.data_dir):
            d.mkdir(parents=True, exist_ok=True)
        write_private(self.config_xml, self.render_config_xml().encode())  # a cluster node's holds passwords
        write_private(self.users_xml, self.render_users_xml().encode())
        # 18.16 runs fine as root (no uid check), so it runs as whoever calls us.
        return [binary, f"--config-file={self.config_xml}"]

    # --- identity & health ----------------------------------------------------------
    def _owns(self, cmdline: str) -> bool:
        return f"--config-file={self.config_xml}" in cmdline

    def _outdated(self) -> bool:
        """A server started before the lock-down lets ``default`` in without a password."""
        try:
            return "password_sha256_hex" not in self.users_xml.read_text()
        except OSError:
            return False

    def _ports(self) -> list[tuple[int, str]]:
        return [
            (self.tcp_port, "ClickHouse native TCP"),
            (self.http_port, "ClickHouse HTTP"),
            (self.interserver_port, "ClickHouse interserver HTTP"),
        ]

    def _log_files(self) -> list[Path]:
        return [self.out_file, self.server_log]

    def _query_version(self, timeout: float) -> str:
        from clickhouse_driver import Client  # type: ignore[import-untyped,unused-ignore]

        client = Client(
            host=LOOPBACK,
            port=self.tcp_port,
            user=CLICKHOUSE_DEFAULT,
            password=self.password(CLICKHOUSE_DEFAULT),
            connect_timeout=min(timeout, 2.0),
            send_receive_timeout=timeout,
            sync_request_timeout=timeout,
        )
        try:
            rows = client.execute("SELECT version()")
        finally:
            client.disconnect()
        return str(rows[0][0])

    def _probe(self, timeout: float) -> bool:
        # No bare TCP pre-check here: 18.16 logs a warning for every connection that
        # sends nothing, and clickhouse-driver fails fast on a refused connection.
        try:
            self._query_version(timeout)
        except Exception:  # any failure means "not healthy yet"
            return False
        return True

    def version(self) -> str:
        """Server version via the native protocol, e.g. '18.16.1'."""
        try:
            return self._query_version(5.0)
        except Exception as exc:
            raise InfraError(
                f"clickhouse: no answer at {self.url} ({exc}); start it with "
                f"`python -m infra up --only clickhouse`. Logs: {self.cfg.logs_dir}"
            ) from exc

    def start(self, timeout: float = 60.0) -> bool:
        """Start the server unless already healthy; False if it was already up."""
        return super().start(timeout)


def kill_and_wait(service: _Service, sig: int, timeout: float = 30.0) -> int:
    """Send `sig` to a running service's process group (tests: SIGKILL, a crash) and wait until it is gone;
    its pid. Raises InfraError when it does not run."""
    pid = service.pid()
    if pid is None:
        raise InfraError(f"{service.name} does not run")
    service.signal(pid, sig)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def stop_together(services: list[_Service]) -> None:
    """SIGTERM every running service at once, then wait for each (SIGKILL after 30 s): the nodes of a
    cluster stopped one by one each wait out their own grace (the last Kafka node has no quorum left for
    its controlled shutdown); together the wait is the slowest node's. Tries all before reporting."""
    for service in services:
        if (pid := service.pid()) is not None:
            _signal(pid, signal.SIGTERM)
    errors: list[str] = []
    for service in services:
        try:
            service.stop()
        except InfraError as exc:
            errors.append(str(exc))
    if errors:
        raise InfraError("\n".join(errors))


# --------------------------------------------------------------------------- facade


def up(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> dict[str, bool]:
    """Start the selected services; returns name -> whether this call started it."""
    started: dict[str, bool] = {}
    if clickhouse:
        server = ClickHouseServer(cfg)
        server.install()
        started["clickhouse"] = server.start()
    if kafka:
        broker = KafkaBroker(cfg)
        broker.install()
        started["kafka"] = broker.start()
    return started


def down(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> None:
    """Stop the selected services; tries all of them before reporting failures."""
    errors: list[str] = []
    services: list[_Service] = []
    if kafka:
        services.append(KafkaBroker(cfg))
    if clickhouse:
        services.append(ClickHouseServer(cfg))
    for service in services:
        try:
            service.stop()
        except InfraError as exc:
            errors.append(str(exc))
    if errors:
        raise InfraError("\n".join(errors))


def status(cfg: InfraConfig, kafka: bool = True, clickhouse: bool = True) -> str:
    """Human-readable state of each service plus where the logs are."""
    lines: list[str] = []
    if kafka:
        lines.append(KafkaBroker(cfg).describe())
    if clickhouse:
        lines.append(ClickHouseServer(cfg).describe())
    lines.append(f"home: {cfg.home}")
    lines.append(f"logs: {cfg.logs_dir}")
    lines.append(f"secrets: {cfg.secrets_dir} (passwords, CA; docs/security.md)")
    return "\n".join(lines)
