"""Supervision of a detached server process, shared by every service (Kafka, ClickHouse,
Alertmanager, Prometheus, ZooKeeper and the cluster nodes).

Why: each server is started once and reused by test fixtures, the Makefile and humans, so the
lifecycle must be idempotent and safe across processes: a pid file guarded against pid reuse
(the command line must be this instance's), a file lock around start and stop, a health probe
that asks the server a real question, SIGTERM then SIGKILL on stop, and log tails in every
failure. ``_Service`` holds that lifecycle; a server supplies its ports, config, argv and probe.
Lower-level helpers (the error, locks, log tails) are ``infra/launcher/process.py``, which the package
installer shares.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from infra.launcher.config import LOOPBACK, InfraConfig
from infra.launcher.ports import ephemeral_port_warnings, ephemeral_range
from infra.launcher.process import POLL_INTERVAL, TAIL_LINES, InfraError, _file_lock, _tail

log = logging.getLogger("infra")

STOP_TIMEOUT = 30.0
MAX_OUT_BYTES = 20 * 1024 * 1024

# Exit codes of servers this Python process spawned and has reaped (see _alive).
_EXIT_CODES: dict[int, int] = {}


# --------------------------------------------------------------------------- pids and ports


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
    def instance(self) -> str:
        """Names this instance's pid, output and lock files: the service's name, unless several run."""
        return self.name

    @property
    def pid_file(self) -> Path:
        return self.cfg.run_dir / f"{self.instance}.pid"

    @property
    def out_file(self) -> Path:
        """stdout/stderr of the server process (crashes before logging is set up land here)."""
        return self.cfg.logs_dir / f"{self.instance}.out"

    @property
    def _workdir(self) -> Path:
        return self.cfg.home / self.name

    # --- public lifecycle -----------------------------------------------------------
    def pid(self) -> int | None:
        """Pid of this instance if it runs: from the pid file, else from the owner of its first port (if any)."""
        pid = _read_pid_file(self.pid_file)
        if pid is not None and _alive(pid) and self._owns(_proc_cmdline(pid) or ""):
            return pid
        ports = self._ports()
        for candidate in _listening_pids(ports[0][0]) if ports else []:
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
            pid = self._spawn_fresh()
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
            pid = self._spawn_fresh()
            log.info("%s: launched pid %d", self.name, pid)
            return pid

    def _spawn_fresh(self) -> int:
        """Spawn the server where none of ours runs (a stale pid file is dropped); its pid. Ports are
        checked before the install and again after it (a slow install leaves time to take them)."""
        self.pid_file.unlink(missing_ok=True)
        self.cfg.ensure_home()
        self._warn_ephemeral_ports()
        self._check_ports()
        self.install()
        argv = self._prepare()
        self._check_ports()
        return self._spawn(argv)

    def await_ready(self, pid: int | None, deadline: float, timeout: float) -> None:
        """Wait until the launched (or running) server answers; InfraError with its log tails if not."""
        if pid is None:
            raise InfraError(f"{self.name}: not running; `python -m infra.launcher up --cluster` starts it")
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
        return _file_lock(self.cfg.run_dir / f"{self.instance}.lock", self.instance)

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
                    f"within {timeout:.0f}s; `python -m infra.launcher down --only {self.name}` resets it"
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


# --------------------------------------------------------------------------- several services


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
    stop_each(services)


def stop_each(services: Sequence[_Service]) -> None:
    """Stop each service in turn; tries all before reporting (one InfraError naming every failure)."""
    errors: list[str] = []
    for service in services:
        try:
            service.stop()
        except InfraError as exc:
            errors.append(str(exc))
    if errors:
        raise InfraError("\n".join(errors))
