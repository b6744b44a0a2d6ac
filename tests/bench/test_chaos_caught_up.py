"""bench.chaos.caught_up judges workers named after their role plus a suffix (`land1`, `detect2`).

It skipped every role whose exact name was not a worker's, so a rig of `detect1`/`detect2`/`land1`/
`land2` (the cluster failover test's) was "caught up" at once, before landing finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.chaos import Rig, caught_up
from infra.settings import Settings


class _Behind:
    """Offsets of a group that has committed nothing yet (pure unit test: no broker)."""

    def ends(self, topics: list[str]) -> dict[tuple[str, int], int]:
        return {(t, 0): 10 for t in topics}

    def covered(self, group: str, targets: dict[Any, int]) -> bool:
        return False


def test_numbered_workers_are_judged(tmp_path: Path) -> None:
    rig = Rig("r", Settings(home=tmp_path), tmp_path, procs={"land1": None, "land2": None})  # type: ignore[dict-item]
    assert caught_up(rig, _Behind(), ("detect", "land")) is False  # type: ignore[arg-type]


def test_roles_without_workers_are_skipped(tmp_path: Path) -> None:
    rig = Rig("r", Settings(home=tmp_path), tmp_path, procs={"land": None})  # type: ignore[dict-item]
    assert caught_up(rig, _Behind(), ("detect",)) is True  # type: ignore[arg-type]
