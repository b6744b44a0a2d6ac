"""The project-local single-node Kafka (KRaft) broker on loopback, and the base of each cluster node.

Why: tests and benchmarks need a real broker without Docker. The jars come from Maven Central
(``infra/launcher/kafka/pom.xml``) into ``<home>/kafka/libs``; the broker listens with SASL/SCRAM-SHA-512
over TLS only (ACLs by StandardAuthorizer, no topic auto-creation or deletion), and the SCRAM
users are seeded when the storage is formatted. Everything is generated on the first start;
the lifecycle is ``_Service``'s (infra/launcher/supervision.py).
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
import subprocess
import time
import uuid
from pathlib import Path
from typing import ClassVar

from infra.files import write_private
from infra.launcher.config import LOOPBACK
from infra.launcher.process import InfraError, _file_lock, _tail, _which
from infra.launcher.supervision import _Service, _tcp_open
from infra.launcher.tls import TlsFiles, ensure_tls
from infra.secrets import KAFKA_PRINCIPALS, ensure_kafka_passwords
from infra.settings import Settings

log = logging.getLogger("infra")

POM_PATH = Path(__file__).resolve().parent / "kafka" / "pom.xml"
KAFKA_VERSION = "3.9.1"
KAFKA_NODE_ID = 1
MAVEN_TIMEOUT = 1800.0


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

    # --- node identity (infra/launcher/kafka_cluster.py overrides these for its three nodes) ----
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
            "# Generated by infra/launcher/kafka_broker.py -- edits are overwritten on every start.",
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
            "# Generated by infra/launcher/kafka_broker.py",
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
