"""Numbered schema migrations for the steplens ClickHouse tables.

Each `mNNNN_*.py` module has `ID`, `DESCRIPTION` and `statements(db, features) -> list[str]`;
`MIGRATIONS` lists them in the order they apply. A migration, once released, is never
edited: a schema change is a new module. `runner.migrate(backend)` applies the missing ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sinks.features import Features
from sinks.migrations import (
    m0001_steps,
    m0002_incidents,
    m0003_jobs,
    m0004_dead_letters,
    m0005_kernel_summaries,
    m0006_kernels,
    m0007_device_samples,
    m0008_profiles,
    m0009_control_commands,
    m0010_topology,
    m0011_rollups,
    m0012_dedup_windows,
    m0013_profile_breakdowns,
    m0014_attempts,
    m0015_packed_parts,
    m0016_reference_models,
    m0017_memory,
    m0018_memory_capacity,
    m0019_actions,
)


@dataclass(frozen=True, slots=True)
class Migration:
    id: str
    description: str
    statements: Callable[[str, Features], list[str]]


MIGRATIONS: tuple[Migration, ...] = tuple(
    Migration(module.ID, module.DESCRIPTION, module.statements)
    for module in (
        m0001_steps, m0002_incidents, m0003_jobs, m0004_dead_letters, m0005_kernel_summaries, m0006_kernels,
        m0007_device_samples, m0008_profiles, m0009_control_commands, m0010_topology, m0011_rollups,
        m0012_dedup_windows, m0013_profile_breakdowns, m0014_attempts, m0015_packed_parts, m0016_reference_models,
        m0017_memory, m0018_memory_capacity, m0019_actions,
    )
)

__all__ = ["MIGRATIONS", "Migration"]
