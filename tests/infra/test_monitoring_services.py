"""Alertmanager and Prometheus as infra/ services: ports from the environment, configs, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.launcher import InfraConfig, InfraError
from infra.launcher.alertmanager import AlertmanagerServer
from infra.launcher.prometheus import PrometheusServer
from infra.settings import REPO_ROOT


def test_ports_come_from_the_environment_and_must_not_collide(tmp_path: Path) -> None:
    cfg = InfraConfig.from_env({"STEPLENS_HOME": str(tmp_path), "STEPLENS_ALERTMANAGER_PORT": "26094",
                                "STEPLENS_PROMETHEUS_PORT": "26090"})
    assert AlertmanagerServer(cfg).url == "http://127.0.0.1:26094"
    assert PrometheusServer(cfg).url == "http://127.0.0.1:26090"
    defaults = InfraConfig(home=tmp_path)
    assert (defaults.alertmanager_port, defaults.prometheus_port) == (19094, 19090)
    with pytest.raises(InfraError, match="both use port 19092"):
        InfraConfig(home=tmp_path, prometheus_port=19092)


def test_alertmanager_config_routes_incidents_and_worker_alerts_apart(tmp_path: Path) -> None:
    text = AlertmanagerServer(InfraConfig(home=tmp_path)).render_config()
    config = json.loads(text.split("\n", 1)[1])  # JSON is YAML; the first line is a comment
    assert config["route"]["group_by"] == ["alertname", "training_job"]
    assert [r["matchers"] for r in config["route"]["routes"]] == [['training_job=~".+"'], ['job="steplens"']]
    assert {r["name"] for r in config["receivers"]} == {"steplens-null", "steplens-training", "steplens-workers"}


def test_prometheus_targets_are_files_it_discovers(tmp_path: Path) -> None:
    server = PrometheusServer(InfraConfig(home=tmp_path))
    path = server.write_targets("w1", "land", ["127.0.0.1:9465"], {"test": "x"})
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:9465"], "labels": {"role": "land", "test": "x"}}]
    server.remove_targets("w1")
    assert not path.exists()


def test_the_cli_lists_every_service(tmp_path: Path) -> None:
    env = {"STEPLENS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "STEPLENS_ALERTMANAGER_PORT": "29094",
           "STEPLENS_PROMETHEUS_PORT": "29090", "STEPLENS_KAFKA_PORT": "29092",
           "STEPLENS_KAFKA_CONTROLLER_PORT": "29093", "STEPLENS_CLICKHOUSE_TCP_PORT": "29000",
           "STEPLENS_CLICKHOUSE_HTTP_PORT": "29123", "STEPLENS_CLICKHOUSE_INTERSERVER_PORT": "29009"}
    out = subprocess.run([sys.executable, "-m", "infra.launcher", "status"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    names = [line.split()[0] for line in out.splitlines() if " stopped " in line or " running " in line]
    assert sorted(set(names)) == ["alertmanager", "clickhouse", "kafka", "munge", "prometheus", "slurmctld", "slurmd"]
    assert names.count("slurmd") == 4
    assert "http://127.0.0.1:29094" in out and "http://127.0.0.1:29090" in out
