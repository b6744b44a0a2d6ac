"""The simulator CLI spools by default (a broker restart must not cost events), or not with --no-spool."""

from __future__ import annotations

from pathlib import Path

import pytest

from producers.simulator.__main__ import main

ARGS = ["--dry-run", "--steps", "3", "--dp", "2", "--tp", "1", "--pp", "1"]


def test_default_spool_is_private_under_steplens_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    assert main(ARGS) == 0
    spool = tmp_path / "spool" / "simulator"
    assert spool.is_dir() and spool.stat().st_mode & 0o777 == 0o700


def test_no_spool_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    assert main([*ARGS, "--no-spool"]) == 0
    assert not (tmp_path / "spool").exists()


def test_hand_placed_faults_become_catalogue_ground_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from producers.simulator.ground_truth import read_ground_truth

    monkeypatch.setenv("STEPLENS_HOME", str(tmp_path))
    monkeypatch.delenv("STEPLENS_CONFIG", raising=False)
    gt = tmp_path / "gt.jsonl"
    assert main(["--dry-run", "--steps", "12", "--dp", "2", "--tp", "2", "--pp", "2", "--job", "cli", "--quiet",
                 "--slow-rank", "3:1.3:2", "--gc-pause", "5,6,9:300", "--data-stall", "8:400:1",
                 "--ground-truth", str(gt)]) == 0
    lines = read_ground_truth(gt)
    assert [(f["kind"], f["ranks"], f["start_step"], f["end_step"]) for f in lines] == [
        ("slow_compute", [3], 2, 11), ("gc_leak", list(range(8)), 5, 6), ("gc_leak", list(range(8)), 9, 9),
        ("slow_data_loader", [1], 8, 8)]
    assert {f["job"] for f in lines} == {"cli"}
