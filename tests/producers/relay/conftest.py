"""Fixtures of the relay tests: a short socket directory, and per-test topics with a relay socket in it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from infra.settings import Settings, load_settings
from schemas import Topics


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """AF_UNIX paths are limited to 107 bytes, pytest's tmp_path can be longer."""
    d = Path(tempfile.mkdtemp(prefix="slr"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def settings(kafka_settings: Settings, unique_name: str, tmp_path: Path, sock_dir: Path) -> Iterator[Settings]:
    """The test broker, this test's own topics (2 partitions) and a relay socket under sock_dir."""
    from streams.topics_admin import ensure_topics

    s = replace(load_settings({}), home=tmp_path / "home", kafka_bootstrap=kafka_settings.kafka_bootstrap,
                secrets_dir=kafka_settings.secrets_path, topic_prefix=f"{unique_name}.", app_id=unique_name,
                topic_partitions=2, relay_socket=str(sock_dir / "relay.sock"), relay_flush_interval_s=0.05)
    ensure_topics(s, Topics(s.topic_prefix), s.topic_partitions)
    yield s
