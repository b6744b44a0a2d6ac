"""Warn about service ports inside the kernel's ephemeral (client) port range.

Why: outgoing connections take their local port from that range; a server port inside it
can be grabbed by any client socket (ours included) between a stop and a start, and the
service then fails to bind at random. The check is a warning, not an error: the range is
machine configuration steplens does not own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """(low, high) of the ephemeral range, or None when it cannot be read (non-Linux)."""
    try:
        low, high = (int(v) for v in Path(path).read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return (low, high) if low <= high else None


def ephemeral_port_warnings(ports: Mapping[str, int], port_range: tuple[int, int] | None) -> list[str]:
    """One message per configured port inside ``port_range`` (name -> port in ``ports``)."""
    if port_range is None:
        return []
    low, high = port_range
    return [
        f"{name}={port} lies inside the kernel's ephemeral port range {low}-{high} "
        f"(net.ipv4.ip_local_port_range): a client socket may take it and the service fail to bind; "
        f"choose a port below {low}"
        for name, port in ports.items()
        if low <= port <= high
    ]
