"""infra/launcher/config.py: the services' settings, defaults and environment overrides (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.launcher import ClickHouseServer, InfraConfig, InfraError, KafkaBroker
from infra.launcher.config import REPO_ROOT


def test_config_defaults_and_env_overrides(tmp_path: Path) -> None:
    default = InfraConfig.from_env({})
    assert default.home == REPO_ROOT / ".steplens"
    assert (default.kafka_port, default.kafka_controller_port) == (19092, 19093)
    assert (default.clickhouse_tcp_port, default.clickhouse_http_port) == (19000, 18123)
    assert default.logs_dir == REPO_ROOT / ".steplens" / "logs"

    cfg = InfraConfig.from_env(
        {
            "STEPLENS_HOME": str(tmp_path / "h"),
            "STEPLENS_KAFKA_PORT": "29092",
            "STEPLENS_KAFKA_CONTROLLER_PORT": "29093",
            "STEPLENS_CLICKHOUSE_TCP_PORT": "29000",
            "STEPLENS_CLICKHOUSE_HTTP_PORT": "28123",
        }
    )
    assert cfg.home == (tmp_path / "h").resolve()
    assert cfg.logs_dir == cfg.home / "logs"
    assert (cfg.kafka_port, cfg.kafka_controller_port) == (29092, 29093)
    assert (cfg.clickhouse_tcp_port, cfg.clickhouse_http_port) == (29000, 28123)
    assert KafkaBroker(cfg).bootstrap == "127.0.0.1:29092"
    assert ClickHouseServer(cfg).url == "clickhouse://127.0.0.1:29000"


@pytest.mark.parametrize(
    "env",
    [
        {"STEPLENS_KAFKA_PORT": "not-a-port"},
        {"STEPLENS_CLICKHOUSE_TCP_PORT": "70000"},
        {"STEPLENS_KAFKA_PORT": "19000"},  # collides with the ClickHouse TCP default
    ],
)
def test_config_rejects_bad_ports(env: dict[str, str]) -> None:
    with pytest.raises(InfraError):
        InfraConfig.from_env(env)


def test_the_kafka_port_moves_the_clients_too() -> None:
    """STEPLENS_KAFKA_PORT moved the broker while the clients still bootstrapped to 19092 (issue #46)."""
    from infra.settings import load_settings

    assert load_settings({}).kafka_bootstrap == "127.0.0.1:19092"
    assert load_settings({"STEPLENS_KAFKA_PORT": "29092"}).kafka_bootstrap == "127.0.0.1:29092"
    named = {"STEPLENS_KAFKA_PORT": "29092", "STEPLENS_KAFKA_BOOTSTRAP": "kafka-1:9092"}
    assert load_settings(named).kafka_bootstrap == "kafka-1:9092"


def test_infra_help_lists_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    from infra.launcher.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("STEPLENS_HOME", "STEPLENS_KAFKA_PORT", "STEPLENS_KAFKA_BOOTSTRAP", "STEPLENS_PROMETHEUS_PORT"):
        assert name in out
