"""The fleet's history as every command opens it.

Why one opener: a command run against a fresh database, or one an older steplens made, must answer (empty, or
from the tables it has) instead of failing, so the missing migrations are applied first. `sinks` is imported
on the call: a command that never reads the history does not pay for it.
"""

from __future__ import annotations

from typing import Any

from infra.settings import Settings


def open_history(settings: Settings) -> Any:
    """`sinks.open_backend(settings)`, migrated: use it as a context manager."""
    from sinks import open_backend
    from sinks.migrations.runner import migrate

    backend = open_backend(settings)
    migrate(backend, cluster=settings.clickhouse_cluster)
    return backend
