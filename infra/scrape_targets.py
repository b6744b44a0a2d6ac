"""Prometheus file_sd target files: how a worker tells Prometheus where its metrics are.

Why: Prometheus (the shipped infra/launcher/prometheus/steplens.yml, or one an operator runs) reads every
``targets/*.json`` and notices new and deleted files by itself. A worker that serves metrics writes
its own file, so Prometheus starts scraping it without anybody listing ports by hand, and deletes it
when it stops on purpose; a crashed worker leaves its file, so its target goes down and
``SteplensWorkerDown`` fires.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def target_file_name(role: str, host: str, port: int) -> str:
    """One file per worker, ``<role>-<host>-<port>`` (``.json`` added on writing: a host:port serves one worker)."""
    return _UNSAFE.sub("_", f"{role}-{host}-{port}")


def write_target_file(directory: Path, name: str, role: str, addresses: list[str],
                      labels: dict[str, str] | None = None) -> Path:
    """Scrape ``addresses`` (host:port) as steplens ``role`` workers in ``<directory>/<name>.json``; written whole
    (rename), so Prometheus never reads half a file."""
    directory.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"targets": addresses, "labels": {"role": role, **(labels or {})}}
    path = directory / f"{name}.json"
    tmp = path.with_suffix(".tmp")  # not matched by the *.json glob until renamed
    tmp.write_text(json.dumps([entry]))
    tmp.replace(path)
    return path
