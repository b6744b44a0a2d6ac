"""actions: the audit trail of the mitigation stage (issue #48), one row per (action_id, verdict).

Every decision the policy takes on a culprit incident lands here with its figures (GPU-hours of
waiting vs acting), the guard's verdict and who took it (the policy, or an operator who approved or
undid it); `steplens actions` lists, approves and undoes from this table. A record re-sent after a
crash replaces itself (same action id and verdict); an approval (`act` after `dry_run`) is a row of
its own, so the trail shows both.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import FULL_PART_STORAGE_BYTES, Features
from sinks.migrations.ddl import create_table

ID = "0019_actions"
DESCRIPTION = "actions table: mitigation decisions and actions, one row per (action_id, verdict)"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("action_id", "String"),
        ("incident_id", "String"),
        ("job", features.dictionary("String")),
        ("level", features.dictionary("String")),
        ("verdict", features.dictionary("String")),
        ("why", "String"),
        ("reason", "String"),
        ("partition", features.dictionary("String")),
        ("by", "String"),
        ("at_ns", features.timestamp()),
        ("host", features.dictionary("Nullable(String)")),
        ("rule", features.dictionary("Nullable(String)")),
        ("scheduler_job", "Nullable(String)"),
        ("age_s", "Float64"),
        ("slowdown", "Float64"),
        ("expected_remaining_s", "Float64"),
        ("history_n", "UInt32"),
        ("lost_so_far_gpu_h", "Float64"),
        ("keep_cost_gpu_h", "Float64"),
        ("act_cost_gpu_h", "Float64"),
        ("undoes", "Nullable(String)"),
        ("event_date", "Date"),
    ]
    # Few rows, read by id and by time: unpartitioned like incidents.
    engine = "ReplacingMergeTree(at_ns)\nORDER BY (action_id, verdict)" + features.dedup_settings()
    packed = ([f"ALTER TABLE {qualified(db, 'actions')} MODIFY SETTING min_bytes_for_full_part_storage = "
               f"{FULL_PART_STORAGE_BYTES}"] if features.packed_parts else [])  # as m0015 for the tables before
    return [create_table(db, "actions", columns, engine), *packed]
