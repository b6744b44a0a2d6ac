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
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

REPO_ROOT = Path(__file__).resolve().parent.parent
P = TypeVar("P", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class DetectionConfig:
    """Thresholds of the slow-step and slow-rank analyses (Hermes §3 of the spec)."""

    warmup_steps: int = 5            # steps ignored before a baseline forms
    baseline_steps: int = 50         # history length for the step-time baseline
    slow_step_ratio: float = 1.10    # step time > ratio x baseline is a slow step (Hermes: 10 %)
    slow_rank_wait_ratio: float = 0.05  # R_wait = 1 - mean(busy)/max(busy) over a group
    slow_rank_z: float = 3.0         # the slowest rank's busy time must also be this many robust sigmas out
    slow_rank_min_steps: int = 3     # consecutive flagged steps before a slow-rank incident opens
    slow_rank_gap_share: float = 0.05  # a group's wait for its late arriver alone, share of the step (mstt: 5 %)
    # graded confirmation (streams/detect/scopes/confirm.py): a deviation far past every threshold confirms sooner
    slow_rank_strong_min_steps: int = 2  # flagged steps for a strong one (>= slow_rank_min_steps: grading off)
    slow_rank_strong_z: float = 10.0     # strong: robust z at least this ...
    slow_rank_strong_excess: float = 0.15  # ... and busy this far over the group median ...
    slow_rank_strong_q_margin: float = 0.25  # ... and Dixon's Q this share of the way from its critical value to 1
    slow_rank_strong_compute_share: float = 0.8  # ... and this share of its excess in device compute
    resolve_after_steps: int = 5     # clean steps before an open incident is resolved
    incident_hold_down_steps: int = 10  # a resolved incident re-opens (same id) on a re-fire this soon after
    culprit_hold_down_steps: int = 50  # ... and one of a rank, host, link, group or stage this soon: a culprit
    # slow in bursts (5 steps every 25) or a flapping link is one incident recording each burst
    window_lateness_steps: int = 8   # a group's step window closes incomplete this many steps behind the newest
    profile_steps: int = 5           # steps of detailed profiling requested for a slow rank
    # engine (streams/detect/engine.py) — windows, scopes; docs/detection.md explains each
    slow_step_mad_z: float = 6.0     # a slow step must also be this many robust sigmas above the baseline
    slow_step_open_after: int = 2    # slow steps in a row before a slow-step incident (1 = eval/checkpoint steps alarm)
    shift_steps: int = 10            # a stable run of slow steps this long is a permanent shift: new baseline
    shift_spread: float = 0.05       # "stable": relative MAD of the run below this
    comm_volume_ratio: float = 1.5   # slow step caused by communication: bytes this x baseline = more traffic
    stall_gap_steps: int = 10        # clean steps allowed between slow steps of an unplanned cause (stalls recur)
    # the job's rhythm (streams/detect/scopes/rhythm.py): periodic work (checkpoint, evaluation) learned, not alarmed
    rhythm_gap_steps: int = 2        # quiet steps inside one episode of a planned kind's work
    rhythm_active_share: float = 0.05  # a planned kind's phase grown by this share of the step: its work goes on
    rhythm_min_period: int = 5       # episodes of one kind this many steps apart or more can be a rhythm
    rhythm_slower_ratio: float = 2.0  # an episode on the rhythm costing this x its past is a finding (storage slowed)
    rhythm_tail_steps: int = 12      # mild slow steps this soon after a planned spike are its aftermath (async write)
    rhythm_tail_ratio: float = 1.3   # ... "mild": at most this x the baseline
    rhythm_tail_spike_ratio: float = 1.4  # ... "spike": the episode's first step at least this x the baseline
    slow_host_fraction: float = 0.5  # share of a host's ranks flagged together that makes a host incident
    slow_link_ratio: float = 1.5     # a group's transfer time this many times its own baseline: slowed (link < 67 %)
    slow_link_open_after: int = 2    # flagged steps before a slow-link incident
    slow_stage_ratio: float = 0.10   # a PP stage this much above its own baseline (and above the others)
    window_timeout_factor: float = 3.0   # a frame waits at most this many recent step times ...
    window_timeout_min_s: float = 5.0    # ... but at least this long ...
    window_timeout_max_s: float = 60.0   # ... and at most this long (then missing ranks may be hung)
    hang_silence_s: float = 20.0     # a rank silent this long while its peers went on is hung (> a detect
    #                                  worker's death: its input partitions are silent ~10 s until reassigned)
    hang_stall_factor: float = 2.0      # devices sampling this many window timeouts past the last step: a hang
    job_silence_s: float = 60.0      # no rank nor device of a job reported this long, no `end`: it stopped
    #                                  (a crash: one JOB_STOPPED incident; > window_timeout_max_s)
    window_max_open_steps: int = 64      # open frames per job before the oldest is closed
    batch_max: int = 10_000          # raw messages per take() of the decode stage
    batch_within_s: float = 0.2      # decode poll timeout (kafka-python returns at once when records are there)
    # decode: polls bringing records within this long of a batch's first join it (one poll is one broker's
    # fetch: on 3 brokers a step came in ~3x more, ~3x smaller polls, and a decode batch has a fixed cost)
    batch_gather_s: float = 0.05
    # detect take(): a chunk waits at most this for its batch. Faust's take() wakes every `within` even with no
    # input: 0.02 s cost an idle detect worker 1.1 % of a core (50 wake-ups/s); 0.1 s costs ~0.2 %
    detect_within_s: float = 0.1
    snapshot_interval_s: float = 1.0  # state snapshot period per changed job (streams/detect/state/)
    # ... stretched so that encoding snapshots takes at most this share of the worker's time (a 10,240-rank job's
    # snapshot costs ~50 ms: once a second that was ~2 µs of detect's ~10 µs per event), as Flink's minimum pause
    # between checkpoints does; a snapshot with outputs to send is never put off; 0 = always the interval.
    snapshot_max_share: float = 0.02
    snapshot_interval_max_s: float = 10.0  # ... and never longer (a restart replays the chunks since the last one)
    metrics_port: int = 0            # Prometheus self-metrics port of the detect worker; 0 = off
    # rules R1–R10 (spec §2), defaults as the spec gives them; 0 = bound off
    rule_open_after: int = 3         # flagged steps before a rule-only incident opens (R4–R10 per rank)
    r1_k: int = 3                    # R1: consecutive samples outside [L, U]
    r1_temp_max_c: float = 85.0
    r1_mem_max_pct: float = 90.0     # spec §4: memory >= 90 % is the memory-mismanagement symptom; judged only
    #                                  on a device whose memory rose into the band during the run (its level, the
    #                                  median of r1_mem_baseline_samples samples after r2_warmup_mem_pct, under
    #                                  the bound): a job that keeps HBM at 95-97 % by design raises nothing
    r1_mem_baseline_samples: int = 20
    r1_power_max_w: float = 0.0
    r1_aicore_min_pct: float = 30.0  # spec §4 unbalanced scheduling: some cores 100 %, others <= 30 %
    r1_membw_min_pct: float = 25.0   # spec §4 memory bottleneck "< 40 %": under the healthy band (38 % at the
    #                                  simulator's 62 % AI Core, >= 30 % on a busy device waiting for a straggler),
    #                                  over the fault's (~23 %); a deployment setting: the device's healthy band
    r1_busy_min_pct: float = 50.0    # a device is busy at AI Core >= this: its T7 and clock lower bounds apply
    r1_job_busy_min_pct: float = 40.0  # the job is busy at median AI Core >= this: the T3 lower bound applies
    #                                    (a checkpoint or eval pause idles every device: ~25 % in the simulator)
    r1_downclock_pct: float = 5.0    # spec §3 "check down-clocking (> 5 %)": clock below the job's highest seen
    #                                  clock by more than this is out of bounds (0 = off)
    r1_gc_max_ms: float = 500.0      # T8: GC pause per step
    r1_gc_k: int = 1
    r2_k: float = 0.5                # R2 CUSUM reference offset
    r2_h: float = 5.0                # R2 alarm threshold
    r2_history: int = 30             # R2 steady-state samples for mu0, sigma0
    r2_warmup: int = 60              # R2: samples skipped first (a starting job heats up: thermal lag) ...
    r2_warmup_power_w: int = 20      # ... power and memory follow the load at once (no lag): the job's own
    r2_warmup_mem_pct: int = 20      # warm-up steps (~11 s in the simulator) and a margin
    r2_confirm: int = 3              # R2: alarms of one device within its last r2_confirm_window samples ...
    r2_confirm_window: int = 6       # ... before it counts (1 = every CUSUM alarm counts, the bare rule)
    r2_sigma_min_temp_c: float = 1.0   # R2 absolute sigma floors (smooth metrics)
    r2_sigma_min_power_w: float = 10.0
    r2_sigma_min_mem_pct: float = 1.0
    r2_transition: float = 0.10      # R2: a tick whose job-wide median moved this share from the last one
    #                                  (a checkpoint, an evaluation, a job-wide stall) and the next tick
    #                                  are left out: hosts sample at their own phase and clocks, so such
    #                                  a tick mixes devices sampled before and after the change
    # OOM forecast (streams/detect/rules/oom_forecast.py, issue #44): a device whose T6 trend reaches 100 %
    # within the horizon; told in steps, converted with the job's recent step time (device samples are timed)
    oom_horizon_steps: float = 200.0  # forecast a run-out this many steps ahead at most (a steady creep is
    #                                   caught as soon as its trend is significant: >= 50 steps ahead at 0.05-0.3
    #                                   %/step from 70-94 %; gc_leak's +0.1 %/step from ~72 % is ~260 steps out)
    oom_min_growth_pct_per_step: float = 0.01  # slower growth is no leak (200 steps to gain 2 %)
    oom_window: int = 48             # samples per device the trend is fitted on (~1 per second); a device is
    #                                  judged once twice as many arrived after its warm-up (its level before)
    oom_t_min: float = 6.0           # the least-squares slope's t statistic, its lag-1 autocorrelation
    #                                  accounted for (0.05 %/step under 0.3 % noise: t ~ 13 over 48 samples;
    #                                  0.2 %/step under an 8 % per-step sawtooth: ~ 7)
    r3_warmup: int = 50              # R3 W
    r3_length: int = 50              # R3 L
    r3_k: float = 2.0                # R3 k (spec: 2–3; 3 missed a 25 % drop behind one eval step in the first window)
    r3_min_deviation: float = 0.05   # R3: a flagged value must also be >= 5 % off the window mean
    r3_adapt_after: int = 50         # R3: alarms in a row after which they become the window (a lasting shift)
    r4_history: int = 100            # R4 N
    r4_iqr_k: float = 1.5
    r4_bench_samples: int = 20       # R4: samples to learn P_bench when not configured
    r4_p_bench: float = 0.0          # R4: configured P_bench in FLOP/s (0 = learn per kernel and shape)
    r4_min_deviation: float = 0.1    # R4: a flagged ratio must also be >= 10 % off the median (tight fences)
    r4_trend_min_deviation: float = 0.10  # R4 on a kernel's job median: >= 10 % (5 %: 2 FAs at 8 % jitter)
    r4_compute_min_deviation: float = 0.06  # R4 on the job's compute (FLOP-weighted over kernels): >= 6 % (4 sigma)
    r5_periods: int = 20             # R5 M
    r5_k: float = 3.0
    r5_min_deviation: float = 0.25   # R5: a slow link is also >= 25 % below its group (waits blur bandwidth)
    r6_k: float = 3.0
    r6_min_deviation: float = 0.2    # R6: a slow group is also >= 20 % below the groups' median (a step's least
    # kernel holds what the least-waiting member waited elsewhere: a few % on a TP group now and then)
    r7_bound: float = 0.4
    r7_jump: float = 0.15
    r8_min_cu: float = 0.7
    r9_low_gbps: float = 0.0         # R9 band (0 = learned from the series' own history)
    r9_high_gbps: float = 0.0
    r9_learned_low: float = 0.7      # R9 learned band: this x the rank's median rate ... (H2D -40 % is a fault)
    r9_learned_high: float = 2.0     # ... to this x it
    r10_severe: float = 0.5
    r10_k: float = 5.0
    r10_min_ratio: float = 0.1
    # below what the fleet achieves (streams/detect/scopes/expected.py, issue #44): a job judged against the fleet's
    # reference models over its first steps, one BELOW_EXPECTED incident when it runs well below them
    reference_models: str = ""       # a reference-model export (JSON, streams/model/reference.py) loaded at start;
    #                                  "" = none (STEPLENS_REFERENCE_MODELS); the fleet learns its own as well
    expected_warmup_steps: int = 5   # a job's first steps not judged (compile, caches, allocator)
    expected_steps: int = 10         # steps judged after them; the verdict comes then (step ~15, < 30)
    expected_decide_by: int = 30     # no verdict by this many steps from the job's start (from its first
    #                                  reference on a fleet that just started): none (silent)
    expected_share: float = 0.8      # share of those steps a component must be below on
    expected_comm_ratio: float = 2.0  # a collective's transfer time >= this x its curve: half the fleet's bandwidth
    expected_compute_ratio: float = 0.85  # a kernel's FLOP/s <= this x the fleet's p50 (and below its p10)
    expected_refit_s: float = 60.0   # the fleet refits its learned models this often (worker clock), and
    #                                  sooner for a job waiting for them (engine.WAITING_REFIT_FRAMES)
    expected_min_jobs: int = 3       # healthy jobs a learned kernel benchmark or curve needs before it judges
    expected_drift_jobs: int = 3     # fleet-wide drift: at least this many running jobs of one link class or
    expected_drift_share: float = 0.5  # device kind below together, and more than this share of those judged on
    #                                    it: ONE fleet incident (job "fleet") listing them, none per job

    def params(self, cls: type[P]) -> P:
        """A scope's or a rule feed's `Params` (streams/detect/scopes/, streams/detect/signals/)
        filled from these settings.

        Each declares only the thresholds it reads, named as the settings here: the settings
        (env, TOML, defaults) stay one flat documented table, and a scope or feed can be read,
        tested and called without the other ninety. The engine builds them per frame: the values
        go in positionally, in the order of the dataclass's fields (`__match_args__`: its fields'
        names in its `__init__`'s order), half the cost of `fields()` and keywords.
        """
        names: tuple[str, ...] = cls.__match_args__  # type: ignore[attr-defined]  # every dataclass has them
        return cls(*[getattr(self, name) for name in names])


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
    detection: DetectionConfig = field(default_factory=DetectionConfig)
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


def _apply(obj: Any, values: Mapping[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ValueError(f"unknown setting {where}{key}")
        current = getattr(obj, key)
        if isinstance(current, DetectionConfig):
            if not isinstance(value, Mapping):
                raise ValueError(f"setting {where}{key} must be a table")
            changes[key] = _apply(current, value, f"{where}{key}.")
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
            settings = _apply(settings, tomllib.load(fh), "")
    top: dict[str, Any] = {key: env[var] for var, (_, key) in _ENV.items() if env.get(var)}
    if env.get("STEPLENS_KAFKA_PORT") and "kafka_bootstrap" not in top and \
            settings.kafka_bootstrap == Settings().kafka_bootstrap:
        # one setting moves the broker (infra/launcher/config.py) and its clients together
        top["kafka_bootstrap"] = f"127.0.0.1:{env['STEPLENS_KAFKA_PORT'].strip()}"
    detection = {
        f.name: env[f"STEPLENS_DETECTION_{f.name.upper()}"]
        for f in fields(DetectionConfig)
        if env.get(f"STEPLENS_DETECTION_{f.name.upper()}")
    }
    if env.get("STEPLENS_REFERENCE_MODELS") and "reference_models" not in detection:
        detection["reference_models"] = env["STEPLENS_REFERENCE_MODELS"]  # the fleet's reference export
    if detection:
        top["detection"] = detection
    result: Settings = _apply(settings, top, "")
    return result
