"""Run the bridge in the foreground until SIGTERM/SIGINT (or, with `once`, until caught up).

Shared by `steplens alerts forward` and `python -m streams worker --role alerts`: one
process, one consumer thread's worth of work, its metrics on `alerts_metrics_port`.
"""

from __future__ import annotations

import logging

from infra.settings import Settings
from streams.alerts.bridge import AlertBridge, BridgeStats
from streams.metrics import Announce
from streams.runtime import stop_on_signals

log = logging.getLogger(__name__)


def forward(settings: Settings, alertmanager_url: str, once: bool = False) -> BridgeStats:
    """Forward incidents to `alertmanager_url`; SIGTERM/SIGINT stop it after the post in hand."""
    bridge = AlertBridge(settings, alertmanager_url, once=once)

    with stop_on_signals(bridge.stop, "alert bridge"):
        bridge.metrics.serve(settings.alerts_metrics_port, Announce.from_settings(settings))
        log.info("alerts: forwarding %s to %s", bridge.topic, alertmanager_url)
        stats = bridge.run()
    log.info("alerts: %s", stats)
    return stats
