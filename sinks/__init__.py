"""Landing steplens telemetry in ClickHouse: a ClickHouse server, or embedded chdb (the default).

`open_backend(settings)` picks the backend, `migrations.runner.migrate(backend)` creates
the tables, `rows` turns events into rows and `writer.BatchingWriter` batches them.
"""

from __future__ import annotations

from sinks.backend import Backend, SinkError
from sinks.features import Features
from steplens.config import Settings


def open_backend(settings: Settings) -> Backend:
    """The ClickHouse server at `settings.clickhouse_url` when set, else chdb at `settings.embedded_path`.

    Both use `settings.clickhouse_database` (a database in the server URL's path wins) and
    create it when missing. See `sinks.embedded` for the rules on sharing an embedded path.
    """
    if settings.uses_server:
        from sinks.server import ServerBackend

        return ServerBackend(settings.clickhouse_url, settings.clickhouse_database)
    from sinks.embedded import EmbeddedBackend

    return EmbeddedBackend(settings.embedded_path, settings.clickhouse_database)


__all__ = ["Backend", "Features", "SinkError", "open_backend"]
