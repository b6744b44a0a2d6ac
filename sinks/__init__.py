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
    from sinks.embedded import EmbeddedBackend, held_by_this_process, in_use_by_another_process

    path = settings.embedded_path
    if in_use_by_another_process(path) and not held_by_this_process(path):
        return _through_its_owner(settings)
    return EmbeddedBackend(path, settings.clickhouse_database)


def _through_its_owner(settings: Settings) -> Backend:
    """The embedded store is another process's (chdb: one process a store): read through the endpoint it
    announces (a land worker does, sinks/read_endpoint.py), or say who holds it and what to do."""
    from sinks.endpoint_backend import EndpointBackend
    from sinks.read_endpoint import endpoint_file, read_announcement

    store = settings.embedded_path
    doc = read_announcement(store)
    if doc is not None:
        return EndpointBackend(store, str(doc["url"]), str(doc["token"]), settings.clickhouse_database,
                               pid=int(doc["pid"]))
    raise SinkError(f"embedded {store}", "open",
                    f"another process holds the store (chdb allows one process per store) and announces no read "
                    f"endpoint ({endpoint_file(store)}): a running land worker serves reads; otherwise stop the "
                    "process that holds it, or use a ClickHouse server (STEPLENS_CLICKHOUSE_URL)")


__all__ = ["Backend", "Features", "SinkError", "open_backend"]
