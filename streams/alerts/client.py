"""POST alerts to Alertmanager's v2 API (urllib: one JSON request, no client library needed)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import orjson

POST_TIMEOUT_S = 10.0
MAX_ALERTS_PER_POST = 500  # keeps one request well under Alertmanager's and proxies' body limits


class AlertmanagerUnavailable(RuntimeError):
    """Alertmanager did not take the alerts (no answer, or an answer other than 2xx); retry later."""


def alerts_endpoint(base_url: str) -> str:
    """`http://host:9093` (or one with a path prefix) -> its `/api/v2/alerts`."""
    return base_url.rstrip("/") + "/api/v2/alerts"


def post_alerts(base_url: str, alerts: list[dict[str, Any]], timeout: float = POST_TIMEOUT_S) -> None:
    """Send `alerts` in requests of at most MAX_ALERTS_PER_POST; raises AlertmanagerUnavailable on any failure."""
    url = alerts_endpoint(base_url)
    for start in range(0, len(alerts), MAX_ALERTS_PER_POST):
        body = orjson.dumps(alerts[start:start + MAX_ALERTS_PER_POST])
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                status = int(resp.status)
        except urllib.error.HTTPError as exc:  # 4xx/5xx: Alertmanager answered and refused
            detail = exc.read()[:300].decode(errors="replace")
            raise AlertmanagerUnavailable(f"{url} answered {exc.code}: {detail}") from None
        except (OSError, urllib.error.URLError) as exc:
            raise AlertmanagerUnavailable(f"{url}: {exc}") from None
        if not 200 <= status < 300:
            raise AlertmanagerUnavailable(f"{url} answered {status}")
