"""Configuration: environment variables over an optional TOML file over documented defaults.

Every setting has an environment variable (STEPLENS_*) and a TOML key; the README's
configuration table lists them. Settings are immutable values passed down explicitly,
never module-level globals.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


DETECTION_ENV = "STEPLENS_DETECTION_"  # + a detection setting's name in capitals
HOOK_FLUSH_INTERVAL_S = 0.5  # default of Settings.hook_flush_interval_s (why 0.5 s: producers/hook/__init__.py)


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path = REPO_ROOT / ".steplens"
    kafka_bootstrap: str = "127.0.0.1:19092"
    topic_prefix: str = "steplens."
    topic_partitions: int = 4
    # copies of every topic and how many must have a write before acks=all returns: 1/1 on the single
    # broker; 3/2 on `python -m infra.launcher up --cluster` (one broker may die, docs/scaling.md)
    topic_replication_factor: int = 1
    topic_min_insync_replicas: int = 1
    clickhouse_url: str = ""          # empty: embedded chdb at chdb_path
    clickhouse_database: str = "steplens"
    # a ClickHouse cluster name (remote_servers): migrations create Replicated*MergeTree `<t>_local` tables and
    # Distributed `<t>` tables ON CLUSTER (sinks/migrations/cluster.py); empty: one server's plain tables
    clickhouse_cluster: str = ""
    chdb_path: Path | None = None     # default: <home>/chdb
    app_id: str = "steplens-worker"
    max_event_bytes: int = 1_048_576
    # landing batch (messages) and its age: one insert per table per batch, and an insert has a fixed cost
    # (embedded, this box: steps ~45-65 ms with its five views, device samples ~20, kernel summaries ~13), paid
    # once a batch whatever the job's size. Packed records fill 20,000 records by age, not size (10,240 ranks:
    # ~3,800 records/s), so the age sets the cost: 5 s instead of 2 s took land -11..16 % CPU per event at
    # 6,400 ranks (bench/results/throughput-land-window-ab.json). SQL sees a row at most this long after it
    # was sent, plus the insert; detection and alerts never wait for landing. (ClickHouse's own Kafka
    # engine flushes every 7.5 s by default.)
    sink_batch_size: int = 20000
    sink_batch_seconds: float = 5.0
    # landing fetches: the broker holds a fetch until this much is there, or this long (at most a quarter of
    # sink_batch_seconds): polls of a filling batch asking for each few new records cost the broker 3x
    sink_fetch_min_bytes: int = 1 << 20
    sink_fetch_max_wait_ms: int = 500
    # workers' gen-0 GC threshold (streams/gc_tuning.py): a batch parses ~100k JSON objects, and at
    # CPython's default (700) collections run ~150 times a batch; 0 keeps the interpreter's default
    worker_gc_threshold: int = 50_000
    # lock-down (docs/security.md): Kafka SASL/SCRAM over TLS and ClickHouse users by default
    kafka_security: str = "sasl_ssl"  # sasl_ssl | plaintext (an unsecured broker of your own)
    kafka_user: str = ""              # empty: the principal the client acts as (producer, detect, ...)
    kafka_password: str = ""          # empty: <secrets_dir>/kafka-<user>.password
    kafka_ca_file: Path | None = None  # default: <secrets_dir>/ca.pem
    # request timeout of every non-admin Kafka client (telemetry producers, the workers' kafka-python
    # clients, alert readers): a broker that stopped answering (SIGSTOP, a network partition) holds a
    # request this long before the client gives it up, refreshes metadata and moves to the partition's
    # new leader. It bounds alert latency while a broker hangs (infra/clients.py, docs/deployment.md).
    kafka_request_timeout_s: float = 2.5
    # longest wait between reconnect attempts to a broker that went away (every Kafka client made by
    # infra/clients.py). kafka-python learns a partition's new leader only when it refreshes metadata,
    # and it refreshes after a failed reconnect: while the dead leader is in backoff a consumer skips
    # its partitions and asks for nothing. So after the controller has moved the leadership, a client
    # can wait up to this long more (measured on the loopback cluster: docs/deployment.md).
    kafka_reconnect_backoff_max_s: float = 1.0
    secrets_dir: Path | None = None   # default: <home>/secrets
    clickhouse_user: str = ""         # empty: steplens_writer to land, steplens_reader to query
    clickhouse_password: str = ""     # empty: <secrets_dir>/clickhouse-<user>.password
    profile_roots: str = ""           # os.pathsep-separated directories profile uris may point into
    profile_root: Path | None = None  # rank hook: where profiles asked for by control commands go; <home>/profiles
    run_dir: Path | None = None       # node-local: the hook registers {device: (job, rank)} here; <home>/run
    hook_spool: bool = True           # rank hook: spool to <home>/spool/<job>/rank<r> while Kafka is down
    hook_peak_flops: float = 0.0      # rank hook: peak FLOP/s of one device, for MFU (0 = unknown)
    hook_flush_interval_s: float = HOOK_FLUSH_INTERVAL_S  # rank hook: longest wait before one send
    # rank hook + node sampler: pack each send round's events per (topic, key) into one JSON-array
    # record (contract 1.2, docs/hook.md); false sends one record per event, for 1.1-only readers.
    emit_pack: bool = True
    # rank hook: hand records to the node's relay on this Unix socket (producers/relay, docs/hook.md#node-relay)
    # instead of running a Kafka client in every rank; empty: each rank sends to Kafka itself. The relay
    # (`python -m producers.relay` or `python -m producers.sampler --relay`) listens on it, default
    # <home>/run/relay.sock when empty on its side.
    relay_socket: str = ""
    relay_flush_interval_s: float = 0.2  # relay: longest wait before the node's records go out in one send
    # relay + rank hook: the relay follows the control topic once for the node and pushes each command to the
    # ranks it names (docs/hook.md#control-through-the-relay); off: every rank runs its own control consumer
    # even when it sends through the relay. Set it the same on the relay and the ranks.
    relay_control: bool = True
    # relay: acknowledge a rank's records once they are in Kafka or the relay's spool (a killed relay loses
    # nothing it acknowledged); off: once queued in its memory (the rank's export returns sooner, a kill -9
    # loses what was acknowledged but not yet produced). docs/hook.md#node-relay
    relay_durable_ack: bool = True
    # the detect stage's thresholds as given: the [detection] table, then STEPLENS_DETECTION_<NAME> variables.
    # The detect stage reads and checks them (streams/detect/config.py `DetectionConfig.of`); names and
    # defaults are documented there.
    detection: Mapping[str, Any] = field(default_factory=dict)
    # detect decode: packed step, kernel-summary and device records decoded by msgspec into typed structs and
    # checked on columns, the same chunks for less CPU (streams/detect/ingest/columns.py); off: every record
    # decoded event by event (orjson dicts)
    detect_columnar_decode: bool = True
    # detect decode in a child process of the detect worker (streams/detect/ingest/process.py, the default): decode
    # and the engine do not take turns on one interpreter lock (~5 % less CPU per event at 10,240 ranks); off: a
    # thread of the worker (one process less, e.g. on a 1-core container)
    detect_decode_process: bool = True
    # the detect worker runs the decode stage itself (above: a child process or a thread); off: run it as its own
    # worker, `python -m streams worker --role decode` (sized, restarted and watched apart from the engine)
    detect_runs_decode: bool = True
    decode_metrics_port: int = 0      # Prometheus self-metrics port of a `--role decode` worker; 0 = off
    # landing: a batch's packed step and device records read to one Arrow block per table by pyarrow, the same
    # rows for less CPU (streams/land/columns.py); off: every record mapped to rows event by event
    land_columnar: bool = True
    parse_workers: int = 1            # processes parsing profile dumps (the parse worker's pool)
    land_metrics_port: int = 0        # Prometheus self-metrics port of the land worker; 0 = off
    land_read_endpoint: bool = True   # landing into embedded chdb: serve read-only queries of it meanwhile
    land_read_endpoint_port: int = 0  # its port on 127.0.0.1 (0: any free one; clients read <store>.endpoint.json)
    # the Alertmanager bridge (`steplens alerts forward`, streams/alerts/, docs/operations.md)
    alertmanager_url: str = ""        # e.g. http://alertmanager:9093; empty: no bridge
    alerts_resend_s: float = 60.0     # a firing incident's alert is re-sent this often (endsAt 4 re-sends ahead)
    alerts_report_url: str = ""       # annotation `report`: URL template with {job}, {incident_id}, {rule}
    alerts_runbook_url: str = ""      # annotation `runbook_url`: docs/runbooks.md served here (+ #rule); "": the file
    alerts_metrics_port: int = 0      # Prometheus self-metrics port of the bridge; 0 = off
    # the mitigation worker (`python -m streams worker --role mitigate`, docs/operations.md#mitigation)
    mitigate_partition: str = ""       # the Slurm partition whose nodes it weighs draining; "": the role cannot run
    mitigate_enabled: str = ""         # partitions (comma-separated) where actions are carried out; "": dry-run
    mitigate_max_drained_share: float = 0.1  # never more of the partition's nodes out of service at once
    mitigate_interval_s: float = 30.0  # how often the open culprit incidents are weighed again
    mitigate_min_age_s: float = 120.0  # no action on a fault younger than this (most transients end sooner)
    mitigate_checkpoint_interval_s: float = 1800.0  # a job's checkpoint period until its rhythm shows its own
    mitigate_relaunch_s: float = 300.0  # relaunch time until the fleet has measured its own (the jobs topic)
    mitigate_node_gpus: int = 8        # devices a drained node takes out of service
    mitigate_metrics_port: int = 0     # Prometheus self-metrics port of the mitigation worker; 0 = off
    live_url: str = ""                # where `steplens serve` is reached: alerts link it (generatorURL); "": none
    # a worker serving its metrics (a *_metrics_port above 0) writes a Prometheus file_sd target file here, and
    # deletes it when it stops cleanly (a crashed worker's stays: its target goes down, SteplensWorkerDown fires)
    metrics_targets_dir: Path | None = None  # default: <home>/prometheus/targets (where `infra up` Prometheus looks)
    metrics_host: str = ""            # the host name the target file gives Prometheus; "": this machine's name

    @property
    def metrics_targets_path(self) -> Path:
        default = self.home / "prometheus" / "targets"
        return self.metrics_targets_dir if self.metrics_targets_dir is not None else default

    @property
    def embedded_path(self) -> Path:
        return self.chdb_path if self.chdb_path is not None else self.home / "chdb"

    @property
    def profile_dir(self) -> Path:
        return self.profile_root if self.profile_root is not None else self.home / "profiles"

    @property
    def run_path(self) -> Path:
        return self.run_dir if self.run_dir is not None else self.home / "run"

    @property
    def relay_path(self) -> Path:
        """Where the node relay listens: relay_socket, else <run dir>/relay.sock."""
        return Path(self.relay_socket).expanduser() if self.relay_socket else self.run_path / "relay.sock"

    @property
    def hook_spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def uses_server(self) -> bool:
        return bool(self.clickhouse_url)

    @property
    def secrets_path(self) -> Path:
        return self.secrets_dir if self.secrets_dir is not None else self.home / "secrets"

    @property
    def profile_root_paths(self) -> tuple[Path, ...]:
        """Where profile uris may point (default: <home>/profiles)."""
        roots = tuple(Path(r).expanduser() for r in self.profile_roots.split(os.pathsep) if r.strip())
        return roots or (self.home / "profiles",)


# env var -> (section, key). Section "" is the top level of Settings.
_ENV = {
    "STEPLENS_HOME": ("", "home"),
    "STEPLENS_KAFKA_BOOTSTRAP": ("", "kafka_bootstrap"),
    "STEPLENS_TOPIC_PREFIX": ("", "topic_prefix"),
    "STEPLENS_TOPIC_PARTITIONS": ("", "topic_partitions"),
    "STEPLENS_TOPIC_REPLICATION_FACTOR": ("", "topic_replication_factor"),
    "STEPLENS_TOPIC_MIN_INSYNC_REPLICAS": ("", "topic_min_insync_replicas"),
    "STEPLENS_CLICKHOUSE_CLUSTER": ("", "clickhouse_cluster"),
    "STEPLENS_CLICKHOUSE_URL": ("", "clickhouse_url"),
    "STEPLENS_CLICKHOUSE_DATABASE": ("", "clickhouse_database"),
    "STEPLENS_CHDB_PATH": ("", "chdb_path"),
    "STEPLENS_APP_ID": ("", "app_id"),
    "STEPLENS_MAX_EVENT_BYTES": ("", "max_event_bytes"),
    "STEPLENS_SINK_BATCH_SIZE": ("", "sink_batch_size"),
    "STEPLENS_SINK_BATCH_SECONDS": ("", "sink_batch_seconds"),
    "STEPLENS_SINK_FETCH_MIN_BYTES": ("", "sink_fetch_min_bytes"),
    "STEPLENS_SINK_FETCH_MAX_WAIT_MS": ("", "sink_fetch_max_wait_ms"),
    "STEPLENS_WORKER_GC_THRESHOLD": ("", "worker_gc_threshold"),
    "STEPLENS_DETECT_COLUMNAR_DECODE": ("", "detect_columnar_decode"),
    "STEPLENS_DETECT_DECODE_PROCESS": ("", "detect_decode_process"),
    "STEPLENS_DETECT_RUNS_DECODE": ("", "detect_runs_decode"),
    "STEPLENS_DECODE_METRICS_PORT": ("", "decode_metrics_port"),
    "STEPLENS_LAND_COLUMNAR": ("", "land_columnar"),
    "STEPLENS_KAFKA_SECURITY": ("", "kafka_security"),
    "STEPLENS_KAFKA_USER": ("", "kafka_user"),
    "STEPLENS_KAFKA_PASSWORD": ("", "kafka_password"),
    "STEPLENS_KAFKA_CA_FILE": ("", "kafka_ca_file"),
    "STEPLENS_KAFKA_REQUEST_TIMEOUT_S": ("", "kafka_request_timeout_s"),
    "STEPLENS_KAFKA_RECONNECT_BACKOFF_MAX_S": ("", "kafka_reconnect_backoff_max_s"),
    "STEPLENS_SECRETS_DIR": ("", "secrets_dir"),
    "STEPLENS_CLICKHOUSE_USER": ("", "clickhouse_user"),
    "STEPLENS_CLICKHOUSE_PASSWORD": ("", "clickhouse_password"),
    "STEPLENS_PROFILE_ROOTS": ("", "profile_roots"),
    "STEPLENS_PARSE_WORKERS": ("", "parse_workers"),
    "STEPLENS_PROFILE_ROOT": ("", "profile_root"),
    "STEPLENS_RUN_DIR": ("", "run_dir"),
    "STEPLENS_HOOK_SPOOL": ("", "hook_spool"),
    "STEPLENS_HOOK_PEAK_FLOPS": ("", "hook_peak_flops"),
    "STEPLENS_HOOK_FLUSH_INTERVAL_S": ("", "hook_flush_interval_s"),
    "STEPLENS_EMIT_PACK": ("", "emit_pack"),
    "STEPLENS_RELAY_SOCKET": ("", "relay_socket"),
    "STEPLENS_RELAY_FLUSH_INTERVAL_S": ("", "relay_flush_interval_s"),
    "STEPLENS_RELAY_CONTROL": ("", "relay_control"),
    "STEPLENS_RELAY_DURABLE_ACK": ("", "relay_durable_ack"),
    "STEPLENS_LAND_METRICS_PORT": ("", "land_metrics_port"),
    "STEPLENS_LAND_READ_ENDPOINT": ("", "land_read_endpoint"),
    "STEPLENS_LAND_READ_ENDPOINT_PORT": ("", "land_read_endpoint_port"),
    "STEPLENS_ALERTMANAGER_URL": ("", "alertmanager_url"),
    "STEPLENS_ALERTS_RESEND_S": ("", "alerts_resend_s"),
    "STEPLENS_ALERTS_REPORT_URL": ("", "alerts_report_url"),
    "STEPLENS_ALERTS_RUNBOOK_URL": ("", "alerts_runbook_url"),
    "STEPLENS_ALERTS_METRICS_PORT": ("", "alerts_metrics_port"),
    "STEPLENS_MITIGATE_PARTITION": ("", "mitigate_partition"),
    "STEPLENS_MITIGATE_ENABLED": ("", "mitigate_enabled"),
    "STEPLENS_MITIGATE_MAX_DRAINED_SHARE": ("", "mitigate_max_drained_share"),
    "STEPLENS_MITIGATE_INTERVAL_S": ("", "mitigate_interval_s"),
    "STEPLENS_MITIGATE_MIN_AGE_S": ("", "mitigate_min_age_s"),
    "STEPLENS_MITIGATE_CHECKPOINT_INTERVAL_S": ("", "mitigate_checkpoint_interval_s"),
    "STEPLENS_MITIGATE_RELAUNCH_S": ("", "mitigate_relaunch_s"),
    "STEPLENS_MITIGATE_NODE_GPUS": ("", "mitigate_node_gpus"),
    "STEPLENS_MITIGATE_METRICS_PORT": ("", "mitigate_metrics_port"),
    "STEPLENS_LIVE_URL": ("", "live_url"),
    "STEPLENS_METRICS_TARGETS_DIR": ("", "metrics_targets_dir"),
    "STEPLENS_METRICS_HOST": ("", "metrics_host"),
}


def _coerce(template: Any, value: Any, name: str) -> Any:
    """Turn a TOML/env value into the type of the default it replaces."""
    kind = type(template)
    try:
        if template is None or isinstance(template, Path):
            return Path(str(value)).expanduser()
        if isinstance(template, bool):
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"setting {name}: cannot read {value!r} as {kind.__name__}") from exc


def apply_table(obj: Any, values: Mapping[str, Any], where: str = "") -> Any:
    """`obj` (a frozen dataclass of settings) with `values` applied, each read as the type of its default;
    an unknown name is an error naming it (`where`: the table's prefix, e.g. "detection.")."""
    known = {f.name for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ValueError(f"unknown setting {where}{key}")
        current = getattr(obj, key)
        if key == "detection" and not where:  # the detect stage's table, kept as given (it checks it)
            if not isinstance(value, Mapping):
                raise ValueError(f"setting {where}{key} must be a table")
            changes[key] = {**current, **value}
        else:
            changes[key] = _coerce(current, value, f"{where}{key}")
    return replace(obj, **changes)


def load_settings(env: Mapping[str, str] | None = None, toml_path: Path | None = None) -> Settings:
    """Defaults, then the TOML file (STEPLENS_CONFIG or `toml_path`), then STEPLENS_* variables.

    STEPLENS_KAFKA_PORT, which moves the local broker, moves the clients' bootstrap with it unless
    STEPLENS_KAFKA_BOOTSTRAP or the TOML file names one.

    Detection thresholds can also be set per variable: STEPLENS_DETECTION_<NAME>.
    """
    env = os.environ if env is None else env
    settings = Settings()
    path = toml_path or (Path(env["STEPLENS_CONFIG"]) if env.get("STEPLENS_CONFIG") else None)
    if path is not None:
        with open(path, "rb") as fh:
            settings = apply_table(settings, tomllib.load(fh))
    top: dict[str, Any] = {key: env[var] for var, (_, key) in _ENV.items() if env.get(var)}
    if env.get("STEPLENS_KAFKA_PORT") and "kafka_bootstrap" not in top and \
            settings.kafka_bootstrap == Settings().kafka_bootstrap:
        # one setting moves the broker (infra/launcher/config.py) and its clients together
        top["kafka_bootstrap"] = f"127.0.0.1:{env['STEPLENS_KAFKA_PORT'].strip()}"
    detection = {var[len(DETECTION_ENV):].lower(): value for var, value in env.items()
                 if var.startswith(DETECTION_ENV) and value}
    if env.get("STEPLENS_REFERENCE_MODELS") and "reference_models" not in detection:
        detection["reference_models"] = env["STEPLENS_REFERENCE_MODELS"]  # the fleet's reference export
    if detection:
        top["detection"] = detection
    result: Settings = apply_table(settings, top)
    return result
