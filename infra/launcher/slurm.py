"""A real Slurm on loopback (Debian's ``slurm-wlm``): munged, slurmctld and one slurmd, project-local.

Why: the mitigation stage (streams/mitigate/, issue #48) drains nodes and requeues jobs through the
scheduler's own commands; its tests run them against a real controller, started and stopped like Kafka and
ClickHouse (infra/launcher/supervision.py), never the system services. Everything lives under
``<home>/slurm`` (config, state, spool, munge key and socket) and ``<home>/logs``; the controller and the
node daemon listen on ``STEPLENS_SLURMCTLD_PORT`` / ``STEPLENS_SLURMD_PORT`` (16817/16818). Clients reach
this instance through ``SLURM_CONF`` (`SlurmCluster.client_env`).

The partition has `NODES` nodes, each a slurmd of its own on this machine (``slurmd -N <node>``, its own
port, pid file, spool and log: Slurm's multiple-slurmd mode), so a share of a partition can be drained as on
a real cluster. Node i listens on ``slurmd_port + i``.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from infra.launcher.apt import apt_install
from infra.launcher.config import LOOPBACK, InfraConfig
from infra.launcher.process import _SBIN_DIRS, InfraError, _which
from infra.launcher.supervision import _alive, _proc_cmdline, _read_pid_file, _Service, stop_each

SLURM_PACKAGES = ("slurm-wlm", "munge")
PARTITION = "steplens"
NODES = 4
CRED_EXPIRE_S = 10


def _binary(name: str) -> str | None:
    return _which(name, _SBIN_DIRS)


def _tcp_open(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


def node_names(count: int = NODES) -> list[str]:
    return [f"steplens-node{i + 1}" for i in range(count)]


class _SlurmPart(_Service):
    """What munged, slurmctld and slurmd share: one directory, one config, one install."""

    @property
    def slurm_dir(self) -> Path:
        return self.cfg.home / "slurm"

    @property
    def _workdir(self) -> Path:
        return self.slurm_dir

    @property
    def conf(self) -> Path:
        return self.slurm_dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.slurm_dir / "munge" / "munge.socket"

    def install(self) -> None:
        """apt-get install slurm-wlm and munge when missing (their system services are not started)."""
        apt_install(SLURM_PACKAGES, self.cfg.logs_dir / "apt.log",
                    lambda: all(_binary(b) for b in ("slurmctld", "slurmd", "munged", "scontrol")), "slurm")


class MungeDaemon(_SlurmPart):
    """munged with a project-local key and socket: Slurm's authentication, as on every real cluster."""

    name: ClassVar[str] = "munge"

    @property
    def address(self) -> str:
        return str(self.munge_socket)

    @property
    def key_file(self) -> Path:
        return self.slurm_dir / "munge" / "munge.key"

    def _prepare(self) -> list[str]:
        binary = _binary("munged")
        if binary is None:
            raise InfraError("munge: munged disappeared after install()")
        self.cfg.ensure_home()
        self.munge_socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.munge_socket.parent, 0o700)
        if not self.key_file.exists():
            self.key_file.write_bytes(os.urandom(1024))
        os.chmod(self.key_file, 0o600)
        return [binary, "--foreground", "--force", f"--socket={self.munge_socket}", f"--key-file={self.key_file}",
                f"--pid-file={self.munge_socket.parent / 'munged.pid'}",
                f"--log-file={self.cfg.logs_dir / 'munged.log'}", f"--seed-file={self.munge_socket.parent / 'seed'}"]

    def _owns(self, cmdline: str) -> bool:
        return f"--socket={self.munge_socket}" in cmdline

    def _ports(self) -> list[tuple[int, str]]:
        return []

    def pid(self) -> int | None:
        """From the pid file alone: munged listens on a socket, not a port."""
        pid = _read_pid_file(self.pid_file)
        return pid if pid is not None and _alive(pid) and self._owns(_proc_cmdline(pid) or "") else None

    def _probe(self, timeout: float) -> bool:
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.settimeout(timeout)
        try:
            unix.connect(str(self.munge_socket))
            return True
        except OSError:
            return False
        finally:
            unix.close()

    def _log_files(self) -> list[Path]:
        return [self.cfg.logs_dir / "munged.log", self.out_file]


def render_slurm_conf(cfg: InfraConfig, host: str, cpus: int, slurm_dir: Path, munge_socket: Path) -> str:
    """slurm.conf for `NODES` nodes on this host in one partition (pure)."""
    logs = cfg.logs_dir
    nodes = [f"NodeName={name} NodeHostname={host} NodeAddr={LOOPBACK} Port={cfg.slurmd_port + i} CPUs={cpus} "
             "RealMemory=1000 State=UNKNOWN" for i, name in enumerate(node_names())]
    return "\n".join([
        "# Generated by infra/launcher/slurm.py; overwritten on every start.",
        "ClusterName=steplens",
        f"SlurmctldHost={host}({LOOPBACK})",
        f"SlurmctldPort={cfg.slurmctld_port}",
        f"SlurmdPort={cfg.slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire: also how long a requeued job waits before it may start again (default 120 s)
        f"AuthInfo=socket={munge_socket},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={slurm_dir / 'state'}",
        f"SlurmdSpoolDir={slurm_dir / 'spool-%n'}",
        f"SlurmctldPidFile={slurm_dir / 'slurmctld.pid'}",
        f"SlurmdPidFile={slurm_dir / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={logs / 'slurmctld.log'}",
        f"SlurmdLogFile={logs / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "MinJobAge=300",
        *nodes,
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class SlurmController(_SlurmPart):
    """slurmctld in the foreground on `slurmctld_port`, its state under <home>/slurm/state."""

    name: ClassVar[str] = "slurmctld"

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.cfg.slurmctld_port}"

    def _prepare(self) -> list[str]:
        binary = _binary("slurmctld")
        if binary is None:
            raise InfraError("slurmctld disappeared after install()")
        (self.slurm_dir / "state").mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(render_slurm_conf(self.cfg, host, os.cpu_count() or 1, self.slurm_dir,
                                               self.munge_socket))
        return [binary, "-D", "-f", str(self.conf)]

    def _owns(self, cmdline: str) -> bool:
        return "slurmctld" in cmdline and str(self.conf) in cmdline

    def _ports(self) -> list[tuple[int, str]]:
        return [(self.cfg.slurmctld_port, "slurmctld")]

    def _probe(self, timeout: float) -> bool:
        scontrol = _binary("scontrol")
        if scontrol is None or not _tcp_open(self.cfg.slurmctld_port, timeout):
            return False
        try:
            done = subprocess.run([scontrol, "ping"], env={**os.environ, "SLURM_CONF": str(self.conf)},
                                  capture_output=True, text=True, timeout=timeout + 5)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and "is UP" in done.stdout

    def _log_files(self) -> list[Path]:
        return [self.cfg.logs_dir / "slurmctld.log", self.out_file]


class SlurmNodeDaemon(_SlurmPart):
    """slurmd for node `index`, in the foreground on `slurmd_port + index`."""

    name: ClassVar[str] = "slurmd"

    def __init__(self, cfg: InfraConfig, index: int) -> None:
        super().__init__(cfg)
        self.index = index
        self.node = node_names()[index]

    @property
    def port(self) -> int:
        return self.cfg.slurmd_port + self.index

    @property
    def instance(self) -> str:
        return f"slurmd-{self.node}"

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _prepare(self) -> list[str]:
        binary = _binary("slurmd")
        if binary is None:
            raise InfraError("slurmd disappeared after install()")
        (self.slurm_dir / f"spool-{self.node}").mkdir(parents=True, exist_ok=True)
        return [binary, "-D", "-N", self.node, "-f", str(self.conf)]

    def _owns(self, cmdline: str) -> bool:
        return "slurmd" in cmdline and f"-N {self.node} " in cmdline and str(self.conf) in cmdline

    def _ports(self) -> list[tuple[int, str]]:
        return [(self.port, f"slurmd of {self.node}")]

    def _probe(self, timeout: float) -> bool:
        return _tcp_open(self.port, timeout)

    def _log_files(self) -> list[Path]:
        return [self.cfg.logs_dir / f"slurmd-{self.node}.log", self.out_file]


class SlurmCluster:
    """munged, then slurmctld, then slurmd: the order each needs the one before."""

    name = "slurm"

    def __init__(self, cfg: InfraConfig) -> None:
        self.cfg = cfg
        self.munge = MungeDaemon(cfg)
        self.controller = SlurmController(cfg)
        self.nodes = [SlurmNodeDaemon(cfg, i) for i in range(NODES)]

    @property
    def parts(self) -> list[_Service]:
        return [self.munge, self.controller, *self.nodes]

    def install(self) -> None:
        self.munge.install()

    def start(self) -> bool:
        """Start what does not run; True if this call started any part."""
        return any([part.start(timeout=90.0) for part in self.parts])

    def stop(self) -> None:
        stop_each(list(reversed(self.parts)))

    def describe(self) -> str:
        return "\n".join(part.describe() for part in self.parts)

    def client_env(self) -> Mapping[str, str]:
        """Environment for `scontrol`, `sinfo`, `sbatch`: this instance's config."""
        return {**os.environ, "SLURM_CONF": str(self.controller.conf)}
