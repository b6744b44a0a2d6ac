"""infra/launcher/services.py: `up` and `status` over the shared services (started or reused, left running
for the rest of the session)."""

from __future__ import annotations

import pytest

from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker, status, up


@pytest.mark.integration
def test_start_is_idempotent(shared_cfg: InfraConfig) -> None:
    broker, server = KafkaBroker(shared_cfg), ClickHouseServer(shared_cfg)
    assert broker.start() is False
    assert server.start() is False
    assert up(shared_cfg) == {"clickhouse": False, "kafka": False}
    assert broker.healthy() and server.healthy()
    assert broker.pid() is not None and server.pid() is not None


@pytest.mark.integration
def test_status_names_logs_dir(shared_cfg: InfraConfig) -> None:
    text = status(shared_cfg)
    assert str(shared_cfg.logs_dir) in text
    assert "kafka" in text and "clickhouse" in text
    assert "stopped" not in text
    assert KafkaBroker(shared_cfg).bootstrap in text
