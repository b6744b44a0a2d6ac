"""Project-local Prometheus (Debian's ``prometheus``) watching steplens's own workers, on loopback.

Why: the shipped scrape configuration and rules (infra/launcher/prometheus/steplens.yml, rules.yml)
are only worth shipping if a real Prometheus loads them, scrapes real workers and fires
their alerts. This instance lives under ``<home>/prometheus`` like the other services
(infra/launcher/supervision.py): installed with apt when missing, never the system service.

Its configuration is the shipped one with three changes for a development machine and the
tests, each checked to apply (a changed shipped file fails loudly here instead of being
silently ignored):
- scrapes and rule evaluations every second instead of every 15 s;
- the rules' ``for:`` durations cut to ``FOR_OVERRIDE``: a stopped worker fires within
  seconds, not a minute (the expressions are the shipped ones, untouched);
- alerts go to the project-local Alertmanager (infra/launcher/alertmanager.py).
Targets are files under ``<home>/prometheus/targets/`` (``write_targets``): Prometheus
notices new ones by itself, so a test adds its workers without a reload.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import ClassVar

from infra.launcher.alertmanager import http_ok
from infra.launcher.apt import apt_install
from infra.launcher.config import LOOPBACK
from infra.launcher.process import InfraError, _which
from infra.launcher.supervision import _Service
from infra.scrape_targets import write_target_file

PROMETHEUS_PACKAGES = ("prometheus",)
SHIPPED_DIR = Path(__file__).resolve().parent / "prometheus"
SHIPPED_CONFIG = SHIPPED_DIR / "steplens.yml"
SHIPPED_RULES = SHIPPED_DIR / "rules.yml"
FAST_INTERVAL = "1s"
FOR_OVERRIDE = "2s"
_FOR_LINE = re.compile(r"^(\s+for:\s*)\S+\s*$", re.MULTILINE)


def prometheus_binary() -> str | None:
    return _which("prometheus")


def promtool_binary() -> str | None:
    return _which("promtool")


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise InfraError(f"prometheus: {SHIPPED_CONFIG} no longer has exactly one {old!r} ({what})")
    return text.replace(old, new)


def render_config(shipped: str, alertmanager: str, interval: str = FAST_INTERVAL) -> str:
    """The shipped steplens.yml with fast intervals and this machine's Alertmanager."""
    text = _replace_once(shipped, "scrape_interval: 15s", f"scrape_interval: {interval}", "scrape interval")
    text = _replace_once(text, "evaluation_interval: 15s", f"evaluation_interval: {interval}", "rule interval")
    return _replace_once(text, '"127.0.0.1:19094"', json.dumps(alertmanager), "Alertmanager target")


def render_rules(shipped: str, for_override: str = FOR_OVERRIDE) -> str:
    """The shipped rules.yml with every ``for:`` duration replaced by ``for_override``."""
    text, count = _FOR_LINE.subn(lambda m: m.group(1) + for_override, shipped)
    if count == 0:
        raise InfraError(f"prometheus: {SHIPPED_RULES} has no `for:` line to shorten")
    return text


def promtool(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``promtool args`` (installed with Prometheus)."""
    tool = promtool_binary()
    if tool is None:
        raise InfraError("prometheus: promtool not found (it comes with Debian's prometheus package)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, check=False)


class PrometheusServer(_Service):
    """One Prometheus on 127.0.0.1:<prometheus_port> scraping the targets under ``targets_dir``."""

    name: ClassVar[str] = "prometheus"

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.cfg.prometheus_port}"

    @property
    def address(self) -> str:
        return self.url

    @property
    def config_file(self) -> Path:
        return self._workdir / "steplens.yml"

    @property
    def rules_file(self) -> Path:
        return self._workdir / "rules.yml"

    @property
    def targets_dir(self) -> Path:
        return self._workdir / "targets"

    @property
    def data_dir(self) -> Path:
        return self._workdir / "data"

    def install(self) -> None:
        """apt-get install prometheus when missing (its system service is not started)."""
        apt_install(PROMETHEUS_PACKAGES, self.cfg.logs_dir / "apt.log",
                    lambda: prometheus_binary() is not None and promtool_binary() is not None, self.name)

    def write_targets(self, name: str, role: str, addresses: list[str], labels: dict[str, str] | None = None) -> Path:
        """Scrape ``addresses`` (host:port) as steplens ``role`` workers; the file is ``targets/<name>.json``."""
        return write_target_file(self.targets_dir, name, role, addresses, labels)

    def remove_targets(self, name: str) -> None:
        (self.targets_dir / f"{name}.json").unlink(missing_ok=True)

    def _prepare(self) -> list[str]:
        binary = prometheus_binary()
        if binary is None:
            raise InfraError("prometheus: its binary disappeared after install()")
        self.cfg.ensure_home()
        for d in (self.data_dir, self.targets_dir):
            d.mkdir(parents=True, exist_ok=True)
        alertmanager = f"{LOOPBACK}:{self.cfg.alertmanager_port}"
        self.config_file.write_text(render_config(SHIPPED_CONFIG.read_text(), alertmanager))
        self.rules_file.write_text(render_rules(SHIPPED_RULES.read_text()))
        return [
            binary,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address={LOOPBACK}:{self.cfg.prometheus_port}",
            "--log.level=info",
        ]

    def _owns(self, cmdline: str) -> bool:
        return f"--config.file={self.config_file}" in cmdline

    def _ports(self) -> list[tuple[int, str]]:
        return [(self.cfg.prometheus_port, "Prometheus HTTP API")]

    def _log_files(self) -> list[Path]:
        return [self.out_file]

    def _probe(self, timeout: float) -> bool:
        return http_ok(f"{self.url}/-/ready", timeout)
