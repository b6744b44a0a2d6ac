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


@dataclass(frozen=True, slots=True)
class DetectionConfig:
    """Thresholds of the slow-step and slow-rank analyses (Hermes §3 of the spec)."""

    warmup_steps: int = 5            # steps ignored before a baseline forms
    baseline_steps: int = 50         # history length for the step-time baseline
    slow_step_ratio: float = 1.10    # step time > ratio x baseline is a slow step (Hermes: 10 %)
    slow_rank_wait_ratio: float = 0.05  # R_wait = 1 - mean(busy)/max(busy) over a group
    slow_rank_z: float = 3.0         # the slowest rank's busy time must also be this many robust sigmas out
    slow_rank_min_steps: int = 3     # consecutive flagged steps before a slow-rank incident opens
    resolve_after_steps: int = 5     # clean steps before an open incident is resolved
    window_lateness_steps: int = 8   # a group's step window closes incomplete this many steps behind the newest
    profile_steps: int = 5           # steps of detailed profiling requested for a slow rank


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path = REPO_ROOT / ".steplens"
    kafka_bootstrap: str = "127.0.0.1:19092"
    topic_prefix: str = "steplens."
    topic_partitions: int = 4
    clickhouse_url: str = ""          # empty: embedded chdb at chdb_path
    clickhouse_database: str = "steplens"
    chdb_path: Path | None = None     # default: <home>/chdb
    app_id: str = "steplens-worker"
    max_event_bytes: int = 1_048_576
    sink_batch_size: int = 5000
    sink_batch_seconds: float = 1.0
    profile_root: Path | None = None  # rank hook: where profiles asked for by control commands go; <home>/profiles
    run_dir: Path | None = None       # node-local: the hook registers {device: (job, rank)} here; <home>/run
    hook_spool: bool = True           # rank hook: spool to <home>/spool/<job>/rank<r> while Kafka is down
    hook_peak_flops: float = 0.0      # rank hook: peak FLOP/s of one device, for MFU (0 = unknown)
    detection: DetectionConfig = field(default_factory=DetectionConfig)

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
    def hook_spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def uses_server(self) -> bool:
        return bool(self.clickhouse_url)


# env var -> (section, key). Section "" is the top level of Settings.
_ENV = {
    "STEPLENS_HOME": ("", "home"),
    "STEPLENS_KAFKA_BOOTSTRAP": ("", "kafka_bootstrap"),
    "STEPLENS_TOPIC_PREFIX": ("", "topic_prefix"),
    "STEPLENS_TOPIC_PARTITIONS": ("", "topic_partitions"),
    "STEPLENS_CLICKHOUSE_URL": ("", "clickhouse_url"),
    "STEPLENS_CLICKHOUSE_DATABASE": ("", "clickhouse_database"),
    "STEPLENS_CHDB_PATH": ("", "chdb_path"),
    "STEPLENS_APP_ID": ("", "app_id"),
    "STEPLENS_MAX_EVENT_BYTES": ("", "max_event_bytes"),
    "STEPLENS_SINK_BATCH_SIZE": ("", "sink_batch_size"),
    "STEPLENS_SINK_BATCH_SECONDS": ("", "sink_batch_seconds"),
    "STEPLENS_PROFILE_ROOT": ("", "profile_root"),
    "STEPLENS_RUN_DIR": ("", "run_dir"),
    "STEPLENS_HOOK_SPOOL": ("", "hook_spool"),
    "STEPLENS_HOOK_PEAK_FLOPS": ("", "hook_peak_flops"),
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

    Detection thresholds can also be set per variable: STEPLENS_DETECTION_<NAME>.
    """
    env = os.environ if env is None else env
    settings = Settings()
    path = toml_path or (Path(env["STEPLENS_CONFIG"]) if env.get("STEPLENS_CONFIG") else None)
    if path is not None:
        with open(path, "rb") as fh:
            settings = _apply(settings, tomllib.load(fh), "")
    top: dict[str, Any] = {key: env[var] for var, (_, key) in _ENV.items() if env.get(var)}
    detection = {
        f.name: env[f"STEPLENS_DETECTION_{f.name.upper()}"]
        for f in fields(DetectionConfig)
        if env.get(f"STEPLENS_DETECTION_{f.name.upper()}")
    }
    if detection:
        top["detection"] = detection
    result: Settings = _apply(settings, top, "")
    return result
