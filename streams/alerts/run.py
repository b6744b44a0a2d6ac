"""Run the bridge in the foreground until SIGTERM/SIGINT (or, with `once`, until caught up).

Shared by `steplens alerts forward` and `python -m streams worker --role alerts`: one
process, one consumer thread's worth of work, its metrics on `alerts_metrics_port`.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType

from infra.settings import Settings
from streams.alerts.bridge import AlertBridge, BridgeStats
from streams.metrics import Announce

log = logging.getLogger(__name__)


def forward(settings: Settings, alertmanager_url: str, once: bool = False) -> BridgeStats:
    """Forward incidents to `alertmanager_url`; SIGTERM/SIGINT stop it after the post in hand."""
    bridge = AlertBridge(settings, alertmanager_url, once=once)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal %d: stopping the alert bridge", signum)
        bridge.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        bridge.metrics.serve(settings.alerts_metrics_port, Announce.from_settings(settings))
        log.info("alerts: forwarding %s to %s", bridge.topic, alertmanager_url)
        stats = bridge.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("alerts: %s", stats)
    return stats
