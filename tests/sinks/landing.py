"""Landing for tests: simulated jobs through the real path below Kafka, and the CLI pointed at a backend.

The jobs' wire events go through the contract's decoder, the land row mapping and the batching
writer, as the land worker lands them (only Kafka left out).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from infra.settings import Settings
from producers.simulator.events import FrameEncoder
from producers.simulator.fleet import FleetJob
from schemas.codec import decode
from sinks import rows
from sinks.backend import Backend
from sinks.embedded import EmbeddedBackend
from sinks.migrations.runner import migrate
from sinks.writer import BatchingWriter


def land_jobs(backend: Backend, jobs: Iterable[FleetJob], events: Iterable[rows.AnyStoredEvent] = ()) -> None:
    """Every frame of `jobs` (steps, kernel summaries, device samples), then `events`, landed in `backend`."""
    migrate(backend)
    writer = BatchingWriter(backend, max_rows=50_000, max_seconds=60.0, max_buffered_rows=400_000)
    now = time.time_ns()
    for job in jobs:
        encoder = FrameEncoder(job)
        for frame in job.iter_frames():
            for wire in encoder.encode(frame):
                for row in rows.rows_for(decode(wire.value), now):
                    writer.add_row(row)
    for event in events:
        for row in rows.rows_for(event, now):
            writer.add_row(row)
    writer.flush()


def point_cli_at(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """STEPLENS_* pointing the CLI (run in this process) at `backend`'s database."""
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    monkeypatch.setenv("STEPLENS_CLICKHOUSE_DATABASE", backend.database)
    if isinstance(backend, EmbeddedBackend):
        monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", "")
        monkeypatch.setenv("STEPLENS_CHDB_PATH", str(backend.path))
    else:
        address = backend.address  # type: ignore[attr-defined]
        monkeypatch.setenv("STEPLENS_CLICKHOUSE_URL", f"clickhouse://{address.host}:{address.port}")


def pipeline_env(settings: Settings, home: Path, store: Path) -> dict[str, str]:
    """The environment of workers on `settings`' broker, topics and app id, landing into embedded `store`."""
    return {**os.environ, "STEPLENS_HOME": str(home), "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
            "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions), "STEPLENS_CLICKHOUSE_URL": "",
            "STEPLENS_CHDB_PATH": str(store), "STEPLENS_SECRETS_DIR": str(settings.secrets_path)}
