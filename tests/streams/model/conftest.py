"""Both ClickHouse backends for the reference-model store tests (the sink tests' fixtures)."""

from __future__ import annotations

from tests.sinks.conftest import backend, embedded_backend, server_backend

__all__ = ["backend", "embedded_backend", "server_backend"]
