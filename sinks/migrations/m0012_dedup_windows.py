"""Insert deduplication windows on the tables created before the landing used dedup tokens.

On engines that honour ``insert_deduplication_token`` (22.2+), a non-replicated MergeTree
remembers the last N block tokens only when ``non_replicated_deduplication_window`` is set;
the tables of migrations 0001–0004 predate it. 18.16 gets no statement: there the
ReplacingMergeTree keys (read with FINAL) are the only guard against a replayed batch.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import DEDUP_WINDOW, Features

ID = "0012_dedup_windows"
DESCRIPTION = "non_replicated_deduplication_window on steps, incidents, jobs and dead_letters (22.2+ engines)"

TABLES = ("steps", "incidents", "jobs", "dead_letters")


def statements(db: str, features: Features) -> list[str]:
    if not features.dedup_token:
        return []
    return [
        f"ALTER TABLE {qualified(db, table)} MODIFY SETTING non_replicated_deduplication_window = {DEDUP_WINDOW}"
        for table in TABLES
    ]
