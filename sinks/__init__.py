"""Landing steplens telemetry in ClickHouse: a ClickHouse server, or embedded chdb (the default).

`open_backend(settings)` picks the backend, `migrations.runner.migrate(backend)` creates
the tables, `rows` turns events into rows and `writer.BatchingWriter` batches them.
"""

from __future__ import annotations

from typing import Literal

from infra.settings import Settings
from sinks.backend import Backend, SinkError
from sinks.features import Features


def open_backend(settings: Settings, access: Literal["write", "read"] = "write") -> Backend:
    """The ClickHouse server at `settings.clickhouse_url` when set, else chdb at `settings.embedded_path`.

    Both use `settings.clickhouse_database` (a database in the server URL's path wins) and
    create it when missing. See `sinks.embedded` for the rules on sharing an embedded path.
    On a server, `access` picks the user (`infra.clients.clickhouse_credentials`): `write`
    lands as `steplens_writer`, `read` queries as the read-only `steplens_reader` and does
    not create the database. Embedded chdb has no users: it is process-local and protected
    by the home directory's 0700 mode (docs/security.md).
    """
    if settings.uses_server:
        from infra.clients import clickhouse_credentials
        from sinks.server import ServerBackend

        creds = clickhouse_credentials(settings, access)
        user, password = creds if creds is not None else (None, None)
        return ServerBackend(settings.clickhouse_url, settings.clickhouse_database, user=user, password=password,
                             create_database=access == "write")
    from sinks.embedded import EmbeddedBackend

    return EmbeddedBackend(settings.embedded_path, settings.clickhouse_database)


__all__ = ["Backend", "Features", "SinkError", "open_backend"]
