"""topology: rank -> host, device and communication groups, maintained from the step rows."""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import Features
from sinks.migrations.ddl import create_rollup, create_table

ID = "0010_topology"
DESCRIPTION = "topology table (job, rank) -> host, device, groups; fed by a materialized view on steps"

GROUPS = ("dp_group", "tp_group", "pp_group", "ep_group", "cp_group", "pp_stage")


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("job", features.dictionary("String")),
        ("rank", "UInt32"),
        ("world", "UInt32"),
        ("host", features.dictionary("String")),
        ("device", "UInt16"),
        ("dp_group", "Int32"),
        ("tp_group", "Int32"),
        ("pp_group", "Int32"),
        ("ep_group", "Int32"),
        ("cp_group", "Int32"),
        ("pp_stage", "Int16"),
        ("seen_ns", "Int64"),
    ]
    # ORDER BY (job, rank): "where does rank r of job j run" and joins of per-rank results to
    # hosts. Every step carries its rank's identity, so the view derives the topology without a
    # separate event; a rank that moved (restart on another host) keeps its latest placement.
    engine = "ReplacingMergeTree(seen_ns)\nORDER BY (job, rank)" + features.dedup_settings()
    keys = ", ".join(("job", "rank", "host", "device", *GROUPS))
    select = (
        f"SELECT {keys}, any(world) AS world, max(start_ns) AS seen_ns\n"
        f"FROM {qualified(db, 'steps')}\nGROUP BY {keys}"
    )
    return [create_table(db, "topology", columns, engine), create_rollup(db, "topology_mv", "topology", select)]
