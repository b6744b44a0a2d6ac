"""reference_models: the fleet's versioned models of what a job should achieve (issue #44).

One row per model entry of one version: a collective's latency curve (kind 'curve': paper
001's 8 parameters per op, link class and group size) or a kernel's fleet benchmark (kind
'kernel': FLOP/s p10/p50/p90 across jobs per kernel key and device kind). A fit writes a new
version; nothing is updated in place, so a detection can always name the version it judged
against, and `steplens model export --version N` gives that version back as JSON.
"""

from __future__ import annotations

from sinks.backend import qualified
from sinks.features import FULL_PART_STORAGE_BYTES, Features
from sinks.migrations.ddl import create_table

ID = "0016_reference_models"
DESCRIPTION = "reference_models table: versioned collective curves and kernel benchmarks of the fleet"


def statements(db: str, features: Features) -> list[str]:
    columns = [
        ("version", "UInt32"),
        ("stack", "String"),
        ("kind", features.dictionary("String")),  # 'curve' | 'kernel'
        ("op", "String"),  # curve: the collective ('allreduce'); kernel: ''
        ("link", "String"),  # curve: 'intra' | 'inter' | 'tcp'; kernel: ''
        ("group_size", "UInt32"),
        ("key", "String"),  # kernel: 'F2:4096x4096x4096'; curve: ''
        ("device_kind", "String"),
        ("t_s_ns", "Float64"),
        ("m1", "Float64"),
        ("m2", "Float64"),
        ("bw_max", "Float64"),  # bytes per ns = GB/s
        ("sig_l", "Float64"),
        ("sig_x0", "Float64"),
        ("sig_k", "Float64"),
        ("sig_b", "Float64"),
        ("fit_error", "Nullable(Float64)"),
        ("samples", "UInt64"),
        ("p10", "Float64"),
        ("p50", "Float64"),
        ("p90", "Float64"),
        ("jobs", "UInt32"),
        ("source", "String"),
        ("created_ns", features.timestamp()),
    ]
    engine = ("ReplacingMergeTree(created_ns)\nORDER BY (version, kind, op, link, group_size, key, device_kind)"
              + features.dedup_settings())
    packed = ([f"ALTER TABLE {qualified(db, 'reference_models')} MODIFY SETTING min_bytes_for_full_part_storage = "
               f"{FULL_PART_STORAGE_BYTES}"] if features.packed_parts else [])  # as m0015 for the tables before
    return [create_table(db, "reference_models", columns, engine), *packed]
