"""The shipped Prometheus files: valid for promtool, and every metric their rules use exists.

promtool comes with Debian's prometheus package, installed by infra/ when missing (like the
servers): these tests fail, never skip, on a machine where it cannot be installed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from infra.launcher import InfraConfig, InfraError
from infra.launcher.prometheus import (
    SHIPPED_CONFIG,
    SHIPPED_RULES,
    PrometheusServer,
    promtool,
    render_config,
    render_rules,
)
from streams.metrics import AlertsMetrics, DetectMetrics, LandMetrics, MitigateMetrics

pytestmark = pytest.mark.prometheus


@pytest.fixture(scope="module")
def installed(infra_config: InfraConfig) -> None:
    PrometheusServer(infra_config).install()


def _ok(*args: str) -> str:
    result = promtool(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_shipped_rules_pass_promtool(installed: None) -> None:
    assert "SUCCESS" in _ok("check", "rules", str(SHIPPED_RULES))


def test_shipped_config_passes_promtool(installed: None, tmp_path: Path) -> None:
    shutil.copytree(SHIPPED_CONFIG.parent, tmp_path / "prometheus")
    (tmp_path / "prometheus" / "targets").mkdir()
    (tmp_path / "prometheus" / "targets" / "detect.json").write_text(
        '[{"targets": ["127.0.0.1:9464"], "labels": {"role": "detect"}}]')
    out = _ok("check", "config", str(tmp_path / "prometheus" / SHIPPED_CONFIG.name))
    assert "1 rule files found" in out


def test_the_local_instance_config_is_the_shipped_one_made_fast(installed: None, tmp_path: Path) -> None:
    config = render_config(SHIPPED_CONFIG.read_text(), "127.0.0.1:26094")
    rules = render_rules(SHIPPED_RULES.read_text(), "2s")
    assert "scrape_interval: 1s" in config and "evaluation_interval: 1s" in config
    assert '"127.0.0.1:26094"' in config
    shipped_for = re.findall(r"^\s+for:", SHIPPED_RULES.read_text(), re.MULTILINE)
    assert len(re.findall(r"^\s+for: 2s$", rules, re.MULTILINE)) == len(shipped_for) > 0
    (tmp_path / "steplens.yml").write_text(config)
    (tmp_path / "rules.yml").write_text(rules)
    _ok("check", "config", str(tmp_path / "steplens.yml"))


def test_a_changed_shipped_config_fails_loudly_instead_of_running_slow() -> None:
    with pytest.raises(InfraError, match="scrape interval"):
        render_config(SHIPPED_CONFIG.read_text().replace("scrape_interval: 15s", "scrape_interval: 30s"), "x:1")


def test_every_steplens_metric_in_the_rules_is_exported_by_a_worker() -> None:
    names: set[str] = set()
    for metrics in (DetectMetrics(), LandMetrics(), AlertsMetrics(), MitigateMetrics()):
        for family in metrics.registry.collect():  # labelled families too, before any sample
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
            names.update(family.name + suffix for suffix in suffixes)
    used = set(re.findall(r"(?<![:\w])((?:steplens|process)_[a-z_]+)\b", SHIPPED_RULES.read_text()))
    assert "process_cpu_seconds_total" in used and "steplens_land_dead_letters_total" in used
    missing = sorted(name for name in used if name not in names)
    assert not missing, f"rules use metrics no worker exports: {missing}"
